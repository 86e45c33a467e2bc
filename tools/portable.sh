#!/usr/bin/env bash
# Imitate other CPUs on this one: run the chapters (nbval) and the unit tests under each arithmetic a learner's
# machine may have. Usage: tools/portable.sh [pytest paths...]   (default: tests chapters, without e2e/slow)
# Each variant sets what tools/numerics.py would otherwise pin (conftest.py leaves a set variable alone):
#   default      PyTorch's scalar kernels (no vector unit), 1 thread
#   avx2         PyTorch's AVX2 kernels, MKL's AVX2 branch, oneDNN at AVX2, 2 threads (the pins)
#   best         whatever this CPU has (AVX-512 here, if present), 2 threads, MKL and oneDNN unpinned
# A run is compared with the committed outputs; a difference means a cell prints something the CPU changes:
# see docs/testing.md ("Outputs that no CPU changes").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
paths=("$@"); [ ${#paths[@]} -eq 0 ] && paths=(tests chapters)
status=0
run() {
  local name=$1; shift
  echo "== $name: $*"
  if env "$@" "$PY" -m pytest -n "${WORKERS:-2}" --dist loadscope -q -p no:cacheprovider --nbval \
       -m "not e2e and not slow" "${paths[@]}" > "/tmp/portable-$name.log" 2>&1; then
    echo "   passed ($(tail -1 "/tmp/portable-$name.log"))"
  else
    status=1; echo "   FAILED: /tmp/portable-$name.log"; grep -E "^FAILED" "/tmp/portable-$name.log" | head -40
  fi
}
for variant in ${VARIANTS:-default avx2 best}; do
  case $variant in
    default) run default ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2 ;;
    avx2)    run avx2 ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
    best)    run best ATEN_CPU_CAPABILITY="$("$PY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())')" \
               OMP_NUM_THREADS=2 MKL_CBWR=AUTO ONEDNN_MAX_CPU_ISA=ALL ;;
    *) echo "unknown variant $variant (default, avx2, best)"; exit 2 ;;
  esac
done
exit $status
