#!/usr/bin/env bash
# Imitate other CPUs on this one: run the chapters (nbval) and the unit tests under each arithmetic a learner's
# machine may have. Usage: tools/portable.sh [pytest paths...]   (default: tests chapters, without e2e/slow)
# Each variant sets what tools/numerics.py would otherwise pin (conftest.py leaves a set variable alone):
#   default      PyTorch's scalar kernels (no vector unit), 1 thread, on 2 test processes
#   avx2         PyTorch's AVX2 kernels, MKL's AVX2 branch, oneDNN at AVX2, 2 threads (the pins), 1 process
#   best         whatever this CPU has (AVX-512 here, if present), 2 threads, MKL and oneDNN unpinned, 1 process
# (2 threads on each of 2 processes would oversubscribe 2 cores: see tools/numerics.py's threads().)
# A run is compared with the committed outputs; a difference means a cell prints something the CPU changes:
# see docs/testing.md ("Outputs that no CPU changes").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
paths=("$@"); [ ${#paths[@]} -eq 0 ] && paths=(tests chapters)
status=0
chapter_seconds() {   # each chapter's time under nbval (its cells' durations over 0.5 s, summed), from the log
  "$PY" - "$1" <<'PY'
import re, sys
total = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([0-9.]+)s (?:setup|call|teardown)\s+chapters/([^:]+)\.ipynb::", line)
    if m:
        total[m[2]] = total.get(m[2], 0) + float(m[1])
print("   " + ", ".join(f"{k[:2]} {v:.0f} s" for k, v in sorted(total.items())) +
      f"; all {sum(total.values()):.0f} s" if total else "   (no chapter timings)")
PY
}
run() {
  local name=$1 workers=$2; shift 2
  echo "== $name ($workers test processes): $*"
  if env "$@" "$PY" -m pytest -n "$workers" --dist loadscope -q -p no:cacheprovider --nbval \
       -m "not e2e and not slow" --durations=0 --durations-min=0.5 "${paths[@]}" \
       > "/tmp/portable-$name.log" 2>&1; then
    echo "   passed ($(tail -1 "/tmp/portable-$name.log"))"
    chapter_seconds "/tmp/portable-$name.log"
  else
    status=1; echo "   FAILED: /tmp/portable-$name.log"; grep -E "^FAILED" "/tmp/portable-$name.log" | head -40
  fi
}
for variant in ${VARIANTS:-default avx2 best}; do
  case $variant in
    default) run default "${WORKERS:-2}" ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2 ;;
    avx2)    run avx2 "${WORKERS:-1}" ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
    best)    run best "${WORKERS:-1}" ATEN_CPU_CAPABILITY="$("$PY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())')" \
               OMP_NUM_THREADS=2 MKL_CBWR=AUTO ONEDNN_MAX_CPU_ISA=ALL ;;
    *) echo "unknown variant $variant (default, avx2, best)"; exit 2 ;;
  esac
done
exit $status
