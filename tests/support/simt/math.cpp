// The explicitly rounded float operations of cuda_shim.hpp. Out of line and compiled with
// -ffp-contract=off (tests/CMakeLists.txt), so a kernel's __fadd_rn(__fmul_rn(a, b), c) is
// two roundings, as on a GPU, and never one fused multiply-add.
#include <cmath>

float __fadd_rn(float a, float b) { return a + b; }
float __fsub_rn(float a, float b) { return a - b; }
float __fmul_rn(float a, float b) { return a * b; }
float __fdiv_rn(float a, float b) { return a / b; }
float __fsqrt_rn(float a) { return std::sqrt(a); }
float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
double __dadd_rn(double a, double b) { return a + b; }
double __dmul_rn(double a, double b) { return a * b; }
