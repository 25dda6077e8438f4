// The .npy reader on files built byte by byte here: every version and dtype it takes, and a
// clear refusal, naming the origin, of every header or payload it must not take.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codistill/data/npy.hpp"
#include "support/test_util.hpp"

using namespace codistill::data;
using Bytes = std::vector<std::uint8_t>;

namespace {

// A .npy image with this header dict and `data_bytes` payload bytes (value i & 0xff).
Bytes npy(const std::string& dict, std::size_t data_bytes, int major = 1) {
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  std::string h = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) b.push_back(static_cast<std::uint8_t>(h.size() >> (8 * i)));
  b.insert(b.end(), h.begin(), h.end());
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<std::uint8_t>(i));
  return b;
}

// The array of a copy of b, which the array keeps (as a mapped file would be kept).
RawArray parse(const Bytes& b) {
  auto keep = std::make_shared<Bytes>(b);
  return npy_array(*keep, keep, "x.npy");
}

}  // namespace

TEST_CASE("npy headers of every version and dtype parse", "[data][npy]") {
  for (int major : {1, 2, 3}) {
    const RawArray a = parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 24, major));
    CHECK(a.dtype == ArrayDtype::f32);
    CHECK(a.shape == std::vector<std::int64_t>{3, 2});
    CHECK(a.bytes.size() == 24);
    CHECK(a.bytes[5] == 5);
  }
  struct Case {
    const char* descr;
    ArrayDtype t;
  };
  for (Case c : {Case{"|u1", ArrayDtype::u8}, Case{"|i1", ArrayDtype::i8}, Case{"<u2", ArrayDtype::u16},
                 Case{"<i2", ArrayDtype::i16}, Case{"<u4", ArrayDtype::u32}, Case{"<i4", ArrayDtype::i32},
                 Case{"<u8", ArrayDtype::u64}, Case{"<i8", ArrayDtype::i64}, Case{"<f2", ArrayDtype::f16},
                 Case{"<f8", ArrayDtype::f64}}) {
    INFO(c.descr);
    const RawArray a = parse(npy(std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (4,), }",
                                 4 * static_cast<std::size_t>(dtype_bytes(c.t))));
    CHECK(a.dtype == c.t);
  }
  // A scalar (shape ()), a zero-length axis, double quotes and Python 2's long suffix.
  CHECK(parse(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8)).numel() == 1);
  CHECK(parse(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 5), }", 0)).numel() == 0);
  CHECK(parse(npy("{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2L,)}", 8)).shape_str() == "(2,)");
}

TEST_CASE("npy values convert exactly", "[data][npy]") {
  // float16: 1.0, -2.0, the smallest subnormal, 65504, inf.
  Bytes b = npy("{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", 0);
  for (std::uint16_t h : {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00}) {
    b.push_back(static_cast<std::uint8_t>(h));
    b.push_back(static_cast<std::uint8_t>(h >> 8));
  }
  std::vector<float> out(5);
  to_float(parse(b), 0, 5, out.data());
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == std::ldexp(1.0f, -24));
  CHECK(out[3] == 65504.0f);
  CHECK(std::isinf(out[4]));
  // int8 and uint64 labels.
  Bytes i8 = npy("{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }", 0);
  i8.push_back(0xff);
  CHECK(integer_at(parse(i8), 0) == -1);
}

TEST_CASE("npy files the loader must not take are refused, naming the problem", "[data][npy]") {
  const std::string ok_tail = "'fortran_order': False, 'shape': (2,), }";
  struct Case {
    Bytes file;
    const char* message;
  };
  Bytes bad_magic = npy("{'descr': '<i4', " + ok_tail, 8);
  bad_magic[1] = 'X';
  Bytes cut_header = npy("{'descr': '<i4', " + ok_tail, 0);
  cut_header.resize(40);
  const std::vector<Case> cases = {
      {bad_magic, "x.npy: not a .npy file"},
      {Bytes{0x93, 'N', 'U'}, "shorter than 10 bytes"},
      {npy("{'descr': '<i4', " + ok_tail, 8, 4), "unsupported .npy version 4.0"},
      {cut_header, "truncated .npy header"},
      {npy("{'descr': '|O', " + ok_tail, 16), "pickled Python objects: refused (never unpickled)"},
      {npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }", 8), "Fortran-ordered array"},
      {npy("{'descr': '>f4', " + ok_tail, 8), "big-endian"},
      {npy("{'descr': [('a', '<i4')], " + ok_tail, 8), "structured dtype"},
      {npy("{'descr': '<U3', " + ok_tail, 24), "unsupported dtype '<U3'"},
      {npy("{'descr': '|b1', " + ok_tail, 2), "unsupported dtype '|b1'"},
      {npy("{'descr': '<i4', " + ok_tail, 7), "truncated: shape (2,) of int32 needs 8 bytes of data, the file has 7"},
      {npy("{'descr': '<i4', " + ok_tail, 9), "1 bytes after the data"},
      {npy("{'descr': '<i4', 'shape': (2,), }", 8), "missing 'fortran_order'"},
      {npy("{'descr': '<i4', 'fortran_order': False, 'shape': 2, }", 8), "unexpected value"},
      {npy("{'descr': '<i4', 'fortran_order': False, 'shape': '2', }", 8), "'shape' is not a tuple"},
      {npy("{'descr': '<i4', 'fortran_order': False, 'shape': (-2,), }", 8), "expected a dimension"},
      {npy("{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 8), "too large"},
      {npy("['descr', '<i4']", 8), "malformed .npy header (expected '{'"},
      {npy("{'descr': '<i4', " + ok_tail + " junk", 8), "text after the dict"},
      {npy("{'descr': '<i4, " + ok_tail, 8), "malformed .npy header"},
  };
  for (const Case& c : cases) {
    INFO(c.message);
    CHECK_THROWS_WITH(parse(c.file), Catch::Contains(c.message));
  }
}

TEST_CASE("a missing .npy file names the file and the reason", "[data][npy]") {
  CHECK_THROWS_WITH(read_npy("/nonexistent/train_x.npy"),
                    Catch::Contains("/nonexistent/train_x.npy: open failed: No such file"));
}
