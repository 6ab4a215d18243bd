#!/usr/bin/env bash
# GPU check for kimi-oracle's Triton pipeline: bit-exactness against the CPU reference on
# >= 200 generated images (incl. 1920x1080, 4032x3024, 7680x4320 at K3 limits, RGBA), the GPU
# benchmarks read against the roofline (bytes per launch, share of this device's floor), and
# the ahead-of-time build (`kimi-oracle gpu build`) for this device's own architecture.
# Installs nothing. Usage: scripts/device_check.sh [--dry-run] RESULTS_DIR
# --dry-run: everything but the CUDA launches, on any machine (the images, every launch planned,
# the copy-floor sizes, the tile sweep's short form planned, the sm_90 build): run it before the
# device minutes are spent.
set -u
DRY=""
if [ "${1:-}" = "--dry-run" ]; then DRY="--dry-run"; shift; fi
if [ $# -ne 1 ]; then echo "usage: $0 [--dry-run] RESULTS_DIR" >&2; exit 2; fi
OUT="$1"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "missing: a python3 interpreter (set PYTHON=...)" | tee "$OUT/missing.txt" >&2; exit 3
fi
unset TRITON_INTERPRET
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$DRY" ]; then
  cd "$ROOT" && "$PY" -m kimi_oracle.workflows.device_main --dry-run "$OUT"
  rc=$?
  echo "dry run results in $OUT (dry_run.json, dry_run.md, build/); exit $rc"
  exit $rc
fi
# Versions first: say exactly what is missing, before any work.
"$PY" - "$OUT" <<'PYEOF'
import json, sys
sys.path.insert(0, ".")
from kimi_oracle.workflows.device_check import versions
v = versions()
print(json.dumps(v, indent=2))
if v["missing"]:
    open(sys.argv[1] + "/missing.txt", "w").write("\n".join(v["missing"]) + "\n")
    print("MISSING:\n  " + "\n  ".join(v["missing"]), file=sys.stderr)
    sys.exit(3)
PYEOF
rc=$?
if [ $rc -ne 0 ]; then exit $rc; fi
cd "$ROOT" && "$PY" -m kimi_oracle.workflows.device_main "$OUT"
rc=$?
echo "results in $OUT (device_check.json, device_check.md, build/build.json, build/build.md); exit $rc"
exit $rc
