//! The chart generator on the checked-in sample (`docs/charts/h200-sample.csv`): it runs,
//! writes the four charts, each parses as XML (a well-formedness check written here, the
//! crate has no dependencies) and holds the expected series and floors.

use std::path::PathBuf;

/// Checks that `doc` is well-formed XML: one root element, every tag closed in order,
/// attribute values quoted, no stray `<` or `&` in text. Returns the start tags' texts.
fn parse_xml(doc: &str) -> Result<Vec<String>, String> {
    let mut rest = doc.trim_start();
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").ok_or("unterminated XML declaration")? + 2..];
    }
    let mut stack: Vec<String> = Vec::new();
    let mut tags = Vec::new();
    let mut roots = 0;
    let check_text = |t: &str| -> Result<(), String> {
        let mut s = t;
        while let Some(i) = s.find('&') {
            let end = s[i..].find(';').ok_or_else(|| format!("bare & in {t:?}"))?;
            let ent = &s[i + 1..i + end];
            let known = ["amp", "lt", "gt", "quot", "apos"].contains(&ent) || ent.starts_with('#');
            if !known {
                return Err(format!("unknown entity &{ent};"));
            }
            s = &s[i + end..];
        }
        if t.contains('>') {
            return Err(format!("stray > in {t:?}"));
        }
        Ok(())
    };
    while !rest.is_empty() {
        let lt = rest.find('<').unwrap_or(rest.len());
        let text = &rest[..lt];
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        check_text(text)?;
        rest = &rest[lt..];
        if rest.is_empty() {
            break;
        }
        let gt = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .ok_or_else(|| format!("</{name}> closes nothing"))?;
            if open != name.trim() {
                return Err(format!("</{name}> closes <{open}>"));
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let name = body
            .split_whitespace()
            .next()
            .ok_or("empty tag")?
            .to_string();
        // Attributes: name="value" pairs.
        let mut attrs = body[name.len()..].trim();
        while !attrs.is_empty() {
            let eq = attrs
                .find('=')
                .ok_or_else(|| format!("attribute without = in <{tag}>"))?;
            let after = attrs[eq + 1..].trim_start();
            let q = after.chars().next().ok_or("attribute without value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute in <{tag}>"));
            }
            let close = after[1..].find(q).ok_or("unterminated attribute")?;
            let value = &after[1..1 + close];
            if value.contains('<') {
                return Err(format!("< in an attribute of <{tag}>"));
            }
            check_text(value)?;
            attrs = after[close + 2..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        tags.push(tag.to_string());
        if !self_closing {
            stack.push(name);
        }
    }
    match (stack.last(), roots) {
        (Some(open), _) => Err(format!("<{open}> is never closed")),
        (None, 1) => Ok(tags),
        (None, n) => Err(format!("{n} root elements")),
    }
}

#[test]
fn the_xml_check_rejects_what_it_should() {
    assert!(parse_xml("<a><b/></a>").is_ok());
    assert!(parse_xml("<a><b></a>").is_err());
    assert!(parse_xml("<a x=1/>").is_err());
    assert!(parse_xml("<a>x & y</a>").is_err());
    assert!(parse_xml("<a/><b/>").is_err());
}

#[test]
fn the_generator_draws_the_checked_in_sample() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let sample = root.join("docs/charts/h200-sample.csv");
    let out = std::env::temp_dir().join(format!("fp8-linear-charts-{}", std::process::id()));
    let files = fp8_linear_charts::write_all(&sample, &out).expect("charts of the sample");
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "deepseek-v3-tflops.svg",
            "deepseek-v3-decode.svg",
            "llama-3-tflops.svg",
            "llama-3-decode.svg"
        ]
    );
    let expect: [(&str, &[&str], usize); 4] = [
        (
            "deepseek-v3-tflops.svg",
            &[
                "LtBlk", "Hopper", "Decode", "Marlin", "Portable", "DeepGEMM",
            ],
            6,
        ),
        (
            "deepseek-v3-decode.svg",
            &["LtBlk", "Hopper", "Decode", "Marlin", "DeepGEMM"],
            6,
        ),
        ("llama-3-tflops.svg", &["LtBlk", "Hopper", "Decode"], 2),
        ("llama-3-decode.svg", &["LtBlk", "Hopper", "Decode"], 2),
    ];
    for (name, kernels, panels) in expect {
        let svg = std::fs::read_to_string(out.join(name)).unwrap();
        let tags = parse_xml(&svg).unwrap_or_else(|e| panic!("{name} is not XML: {e}"));
        assert!(tags[0].starts_with("svg "), "{name}: root {}", tags[0]);
        let count = |s: &str| tags.iter().filter(|t| t.contains(s)).count();
        assert_eq!(count("class=\"panel\""), panels, "{name}: panels");
        for k in kernels {
            assert!(
                count(&format!("data-kernel=\"{k}\"")) > 0,
                "{name}: no series {k}"
            );
        }
        assert_eq!(
            count("data-floor=\"weight-read\""),
            panels,
            "{name}: floors"
        );
        assert_eq!(
            count("data-floor=\"read-once\""),
            panels,
            "{name}: read-once floors"
        );
    }
    // The committed charts are the sample's (regenerated with the command of BENCHMARKS.md).
    for name in &names {
        let fresh = std::fs::read_to_string(out.join(name)).unwrap();
        let committed =
            std::fs::read_to_string(root.join("docs/charts").join(name)).unwrap_or_default();
        assert!(
            fresh == committed,
            "docs/charts/{name} is not what the sample draws: run \
             `cargo run -p fp8-linear-charts -- docs/charts/h200-sample.csv docs/charts`"
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bench_variants_and_floors_are_not_series() {
    let text = "source,gpu,bench,kernel,n,k,m,us\n\
                run-1,GPU,hopper,LtBlk,4096,4096,1,20\n\
                run-1,GPU,hopper,LtBlk,4096,4096,16,21\n\
                run-1,GPU,hopper,Hopper-s1,4096,4096,16,30\n\
                run-1,GPU,decode,Decode-g,4096,4096,1,15\n\
                run-1,GPU,decode,ReadOnce,4096,4096,0,7.8\n\
                run-1,GPU,gpu,CublasLtBlockFp8,4096,4096,64,22\n";
    let points = fp8_linear_charts::csv::parse(text).unwrap();
    let class = &fp8_linear_charts::chart::CLASSES[1];
    let svg =
        fp8_linear_charts::chart::chart(&points, class, fp8_linear_charts::chart::Kind::Tflops)
            .unwrap();
    parse_xml(&svg).unwrap();
    assert!(svg.contains("data-kernel=\"LtBlk\""), "{svg}");
    assert!(!svg.contains("Hopper-s1") && !svg.contains("Decode-g") && !svg.contains("CublasLt"));
    assert_eq!(svg.matches("data-floor=\"read-once\"").count(), 1);
    // A row that is not a point names its line.
    let bad = fp8_linear_charts::csv::parse("a,b,c\n").unwrap_err();
    assert_eq!(bad.line, 1);
}
