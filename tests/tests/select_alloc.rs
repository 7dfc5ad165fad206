//! `select` allocates nothing on the success path, even when it walks past rejected,
//! disabled and other-platform candidates. Counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use fp8_linear::tables::CPU_BLOCK;
use fp8_linear::{DType, Device, LayerConfig, Overrides};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::SeqCst);
    f();
    ALLOCS.load(Ordering::SeqCst) - before
}

#[test]
fn success_path_allocates_nothing() {
    let layer = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
    let cpu = Device::cpu(2);
    let none = Overrides::none();
    let skip = Overrides::none()
        .disable("CpuFp8Gemm")
        .force("NoSuchKernel");
    let mut profiles = vec![
        Device::profile("a100").unwrap(),
        Device::profile("h200").unwrap(),
    ];
    profiles.retain(|d| fp8_linear::tables::BUILTIN.select(d, &layer, &none).is_ok());
    let n = allocations_during(|| {
        for _ in 0..100 {
            assert!(fp8_linear::tables::BUILTIN
                .select(&cpu, &layer, &none)
                .is_ok());
            assert!(CPU_BLOCK.select(&cpu, &layer, &skip).is_ok());
            for d in &profiles {
                assert!(fp8_linear::tables::BUILTIN.select(d, &layer, &none).is_ok());
            }
        }
    });
    assert_eq!(n, 0, "select allocated {n} times on the success path");
    // Guard against a counter that never moves (one test only: tests run in parallel).
    let n = allocations_during(|| drop(std::hint::black_box(vec![1u64, 2, 3])));
    assert!(n >= 1);
}
