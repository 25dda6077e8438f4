#include "checkpoint/layout.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/dtype.hpp"

namespace codistill::checkpoint::layout {

ChunkPlan::Piece ChunkPlan::piece(std::uint64_t k, const Dims& dims) const {
  Piece p;
  p.offset.assign(dims.size(), 0);
  std::uint64_t o = k / blocks, b = k % blocks;
  p.offset[split] = b * rows;
  for (std::size_t i = split, rest = o; i-- > 0;) {  // o is a row-major index over dims[0, split)
    p.offset[i] = rest % dims[i];
    rest /= dims[i];
  }
  p.first = (o * dims[split] + b * rows) * inner;
  p.elements = std::min(rows, dims[split] - b * rows) * inner;
  return p;
}

namespace {

ChunkPlan make_plan(const Dims& dims, std::size_t split, std::uint64_t rows) {
  ChunkPlan plan;
  plan.split = split;
  plan.rows = rows;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i < split) plan.outer *= dims[i];
    if (i > split) plan.inner *= dims[i];
    plan.chunk_dims.push_back(i < split ? 1 : i == split ? rows : dims[i]);
  }
  plan.blocks = (dims[split] + rows - 1) / rows;
  return plan;
}

}  // namespace

std::optional<ChunkPlan> plan_chunks(const Dims& dims, std::uint64_t max_elements) {
  if (dims.empty()) return std::nullopt;
  for (auto d : dims)
    if (d == 0) return std::nullopt;
  max_elements = std::max<std::uint64_t>(max_elements, 1);
  // Split the first dimension whose trailing rows fit in a chunk into blocks of rows:
  // inner = product of the dimensions after split <= max_elements.
  std::size_t split = dims.size() - 1;
  std::uint64_t inner = 1;
  for (std::size_t i = dims.size() - 1; i > 0; --i) {
    if (inner > max_elements / dims[i]) break;  // inner * dims[i] would not fit
    inner *= dims[i];
    split = i - 1;
  }
  std::uint64_t d = dims[split];
  std::uint64_t max_rows = std::max<std::uint64_t>(1, max_elements / inner);
  if (d <= max_rows) return make_plan(dims, split, d);
  // Among row counts from max_rows down to half of it (chunks stay large), take the one
  // that pads the last chunk least: a divisor of d pads nothing. Ties go to more rows.
  std::uint64_t best = max_rows, best_waste = ((d + max_rows - 1) / max_rows) * max_rows - d;
  for (std::uint64_t r = max_rows - 1, tries = 0; r >= std::max<std::uint64_t>(1, max_rows / 2) && best_waste > 0 &&
                                                  tries < 65536;
       --r, ++tries) {
    std::uint64_t waste = ((d + r - 1) / r) * r - d;
    if (waste < best_waste) best = r, best_waste = waste;
  }
  return make_plan(dims, split, best);
}

std::optional<ChunkPlan> plan_from_chunk_dims(const Dims& dims, const Dims& chunk_dims) {
  if (dims.empty() || dims.size() != chunk_dims.size()) return std::nullopt;
  // split = the first dimension whose chunk extent is not 1 (the last one if all are).
  std::size_t split = 0;
  while (split + 1 < dims.size() && chunk_dims[split] == 1) ++split;
  for (std::size_t i = split + 1; i < dims.size(); ++i)
    if (chunk_dims[i] != dims[i]) return std::nullopt;
  if (chunk_dims[split] == 0 || dims[split] == 0) return std::nullopt;
  return make_plan(dims, split, chunk_dims[split]);
}

std::string full_path(Section s, const std::string& name) {
  return std::string("/") + section_group(s) + "/" + name;
}

std::string name_problem(const std::string& name) {
  if (name.empty()) return "empty tensor name";
  if (name.front() == '/' || name.back() == '/') return "tensor name '" + name + "' starts or ends with '/'";
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = std::min(name.find('/', start), name.size());
    std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return "tensor name '" + name + "' has an empty, '.' or '..' component";
    start = end + 1;
  }
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return "tensor name '" + name + "' holds a control character";
  return {};
}

std::string digest_header(const std::string& path, ElemType t, const Dims& dims) {
  std::string h = path;
  h.push_back('\0');
  h += elem_name(t);
  h.push_back('\0');
  auto put = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(dims.size());
  for (auto d : dims) put(d);
  return h;
}

namespace {

// Exponent all ones <=> NaN or Inf. Blocks are scanned branch-free (vectorizable) and
// only a block that has one is searched element by element.
template <class U>
std::int64_t scan(const unsigned char* p, std::uint64_t n, U exp_mask) {
  constexpr std::uint64_t kBlock = 4096;
  for (std::uint64_t start = 0; start < n; start += kBlock) {
    std::uint64_t len = std::min(kBlock, n - start);
    unsigned bad = 0;
    for (std::uint64_t i = 0; i < len; ++i) {
      U bits;
      std::memcpy(&bits, p + (start + i) * sizeof(U), sizeof(U));
      bad |= (bits & exp_mask) == exp_mask;
    }
    if (!bad) continue;
    for (std::uint64_t i = 0; i < len; ++i) {
      U bits;
      std::memcpy(&bits, p + (start + i) * sizeof(U), sizeof(U));
      if ((bits & exp_mask) == exp_mask) return static_cast<std::int64_t>(start + i);
    }
  }
  return -1;
}

}  // namespace

std::int64_t first_non_finite(const void* data, std::uint64_t n, ElemType t) {
  auto p = static_cast<const unsigned char*>(data);
  if (t == ElemType::f32) return scan<std::uint32_t>(p, n, 0x7f800000u);
  if (t == ElemType::f64) return scan<std::uint64_t>(p, n, 0x7ff0000000000000ull);
  if (t == ElemType::bf16) return scan<std::uint16_t>(p, n, static_cast<std::uint16_t>(0x7f80u));
  return -1;
}

// memcpy per element: `out` and `in` are byte buffers of any alignment (chunk buffers).
void to_bf16(const float* x, unsigned char* out, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint16_t b = kernels::bf16_round(x[i]);
    std::memcpy(out + 2 * i, &b, 2);
  }
}

void from_bf16(const unsigned char* in, float* y, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, in + 2 * i, 2);
    y[i] = kernels::bf16_to_float(b);
  }
}

}  // namespace codistill::checkpoint::layout
