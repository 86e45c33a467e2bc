# Loaded by pytest before anything imports torch: pin the CPU code paths (tools/numerics.py), so that nbval's
# kernels (which inherit this environment) print the committed numbers on any x86-64 machine with AVX2.
from tools import numerics

numerics.apply()
