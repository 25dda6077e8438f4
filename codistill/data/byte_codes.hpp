#pragma once
// Datasets whose raw values are bytes (IDX pixels: Fashion-MNIST, kind idx) keep each value's
// byte beside the normalized float32 images, and the training batch is gathered from the
// bytes: a quarter of the memory traffic on the hot path (rows at random from ~190 MB of
// floats are mostly cache misses). A byte decodes to exactly the float normalize() stored:
// static_cast<float>((code - shift) * (1 / scale)) in double, the same operations in the same
// order; attach_codes() checks every value against the images once and keeps no codes
// unless all of them match bit for bit, so that gathering from codes is never a different
// batch.
#include <cstdint>
#include <vector>

namespace codistill::data {

struct Dataset;

// The raw values' bytes, or an empty vector when some value is not an integer in [0, 255]
// (synthetic data; data normalized elsewhere). Call before normalize().
std::vector<std::uint8_t> byte_codes(const Dataset& raw);

// Keeps `codes` (from byte_codes of this dataset before normalize()) when every code
// decodes to its image value bit for bit; else leaves d.codes empty. True when kept.
bool attach_codes(Dataset& d, std::vector<std::uint8_t> codes);

// out[i] = the float codes[i] stands for under d's normalization (d.codes' rule).
void decode_codes(const Dataset& d, const std::uint8_t* codes, float* out, std::int64_t n);

}  // namespace codistill::data
