//! Reads criterion's saved estimates back, so a benchmark can print its own ratios.

use std::collections::HashMap;

/// Mean time in nanoseconds of every benchmark criterion has saved, by (group, function).
pub fn criterion_means() -> HashMap<(String, String), f64> {
    // target/criterion/<group>/<function>/new/{benchmark,estimates}.json
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion");
    let mut means = HashMap::new();
    for group in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for function in std::fs::read_dir(group.path()).into_iter().flatten().flatten() {
            let new = function.path().join("new");
            let read = |name: &str| -> Option<serde_json::Value> {
                serde_json::from_str(&std::fs::read_to_string(new.join(name)).ok()?).ok()
            };
            let (Some(id), Some(estimates)) = (read("benchmark.json"), read("estimates.json")) else { continue };
            let key = (
                id["group_id"].as_str().unwrap_or("").to_string(),
                id["function_id"].as_str().unwrap_or("").to_string(),
            );
            if let Some(mean) = estimates["mean"]["point_estimate"].as_f64() {
                means.insert(key, mean);
            }
        }
    }
    means
}
