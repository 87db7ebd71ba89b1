#!/usr/bin/env bash
# Soak: cri-bridge under a mixed load into a real containerd for SECONDS (default 1800), with
# its RSS, open fds and p99 sampled every 5 s; ends by saying whether anything grew.
# Needs root and what .ci/run installs. Not in CI. See benches/soak.rs for the knobs.
set -euo pipefail
cd "$(dirname "$0")/.."
SOAK_SECONDS=${1:-1800} cargo bench --bench soak
