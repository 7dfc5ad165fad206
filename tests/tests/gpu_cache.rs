//! The on-disk module cache on a real GPU: a cold load compiles with NVRTC and stores the
//! cubin; after forgetting the in-memory modules the next load comes from disk; concurrent
//! first use from several threads works. Prints cold and warm load times. Uses its own
//! cache directory (FP8_LINEAR_CACHE_DIR) so it always starts cold. Skips without a GPU
//! unless FP8_REQUIRE_CUDA=1.

use fp8_linear::cuda::runtime::{LoadSource, ModuleSpec};
use fp8_linear::cuda::sources;
use fp8_linear_tests::gpu::gpu_or_skip;

#[test]
fn second_load_comes_from_disk() {
    let dir =
        std::env::temp_dir().join(format!("fp8-linear-cache-gpu-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: set before any other thread of this test binary reads the environment
    // (this binary holds this one test).
    unsafe { std::env::set_var("FP8_LINEAR_CACHE_DIR", &dir) };
    let Some(gpu) = gpu_or_skip("second_load_comes_from_disk") else {
        return;
    };
    let specs: Vec<(&str, ModuleSpec)> = vec![
        ("quant", sources::quant_module()),
        (
            "block_gemm BM=128",
            sources::block_gemm_module(4, 4, 1, (128, 128)),
        ),
        (
            "block_gemm BM=32",
            sources::block_gemm_module(1, 4, 1, (128, 128)),
        ),
    ];
    for (what, spec) in &specs {
        gpu.forget_modules();
        let (_, cold) = gpu.module(spec).unwrap();
        assert_eq!(
            cold.source,
            LoadSource::Compiled,
            "{what}: the cache dir was empty"
        );
        let (_, mem) = gpu.module(spec).unwrap();
        assert_eq!(mem.source, LoadSource::Memory);
        gpu.forget_modules();
        let (_, warm) = gpu.module(spec).unwrap();
        assert_eq!(
            warm.source,
            LoadSource::Disk,
            "{what}: second load must come from disk"
        );
        eprintln!(
            "module cache {what}: cold (NVRTC compile + load) {:.1} ms, warm (disk) {:.2} ms, memory {:.3} ms",
            cold.millis, warm.millis, mem.millis
        );
    }
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        files,
        specs.len(),
        "one cubin per module, no temporary files left"
    );

    // Concurrent first use: a fresh directory, four threads loading the same module.
    let dir2 = dir.join("concurrent");
    // SAFETY: no other thread is running now.
    unsafe { std::env::set_var("FP8_LINEAR_CACHE_DIR", &dir2) };
    gpu.forget_modules();
    let spec = sources::quant_module();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| gpu.module(&spec).map(|(_, st)| st.source)))
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    });
    let names: Vec<String> = std::fs::read_dir(&dir2)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".cubin"), "{names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
