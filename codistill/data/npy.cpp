#include "codistill/data/npy.hpp"

#include <cctype>
#include <optional>
#include <stdexcept>

#include "codistill/data/mapped_file.hpp"

namespace codistill::data {
namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw std::runtime_error(origin + ": " + what);
}

// The header's dict literal, as NumPy writes it (and as Python's literal syntax allows
// for what NumPy reads back): string keys, and string, True/False or tuple-of-int values.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

  struct Entry {
    std::string key;
    std::string str;                    // a string value
    std::optional<bool> flag;           // True / False
    std::vector<std::int64_t> tuple;    // a tuple of ints
    bool is_tuple = false;
    bool is_list = false;               // a list: a structured dtype's descr
  };

  std::vector<Entry> parse() {
    std::vector<Entry> out;
    expect('{');
    while (!peek('}')) {
      Entry e;
      e.key = string();
      expect(':');
      value(e);
      out.push_back(std::move(e));
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip();
    if (i_ != s_.size()) bad("text after the dict");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(origin_, "malformed .npy header (" + what + " at byte " + std::to_string(i_) + " of the header)");
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool peek(char c) {
    skip();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    skip();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a quoted string");
    const char q = s_[i_++];
    const std::size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string v(s_.substr(i_, end - i_));
    i_ = end + 1;
    return v;
  }
  std::int64_t integer() {
    skip();
    std::int64_t v = 0;
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      if (v > (INT64_MAX - 9) / 10) bad("dimension too large");
      v = v * 10 + (s_[i_++] - '0');
    }
    if (i_ == start) bad("expected a dimension");
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2's long suffix
    return v;
  }
  void value(Entry& e) {
    skip();
    if (peek('\'') || peek('"')) {
      e.str = string();
    } else if (s_.substr(i_, 4) == "True") {
      e.flag = true, i_ += 4;
    } else if (s_.substr(i_, 5) == "False") {
      e.flag = false, i_ += 5;
    } else if (peek('(')) {
      ++i_;
      e.is_tuple = true;
      while (!peek(')')) {
        e.tuple.push_back(integer());
        if (!peek(')')) expect(',');
      }
      ++i_;
    } else if (peek('[')) {
      e.is_list = true;
      int depth = 0;  // skipped: only its presence matters
      do {
        if (s_[i_] == '[') ++depth;
        if (s_[i_] == ']') --depth;
        ++i_;
      } while (depth > 0 && i_ < s_.size());
    } else {
      bad("unexpected value");
    }
  }

  std::string_view s_;
  const std::string& origin_;
  std::size_t i_ = 0;
};

ArrayDtype parse_descr(const std::string& d, const std::string& origin) {
  if (d.size() >= 2 && (d[1] == 'O' || d[0] == 'O'))
    fail(origin, "dtype object ('" + d + "') holds pickled Python objects: refused (never unpickled); "
                 "save a numeric array, e.g. np.save(path, x.astype(np.float32))");
  if (d.size() < 3 || (d[0] != '<' && d[0] != '|' && d[0] != '=' && d[0] != '>'))
    fail(origin, "unsupported dtype '" + d + "'");
  const std::string code = d.substr(1);
  static const std::pair<const char*, ArrayDtype> known[] = {
      {"u1", ArrayDtype::u8},  {"i1", ArrayDtype::i8},  {"u2", ArrayDtype::u16}, {"i2", ArrayDtype::i16},
      {"u4", ArrayDtype::u32}, {"i4", ArrayDtype::i32}, {"u8", ArrayDtype::u64}, {"i8", ArrayDtype::i64},
      {"f2", ArrayDtype::f16}, {"f4", ArrayDtype::f32}, {"f8", ArrayDtype::f64}};
  for (const auto& [name, t] : known) {
    if (code != name) continue;
    if (d[0] == '>' && dtype_bytes(t) > 1)
      fail(origin, "dtype '" + d + "' is big-endian: save it little-endian, e.g. x.astype('<" + code + "')");
    return t;
  }
  fail(origin, "unsupported dtype '" + d + "' (valid: uint8, int8, uint16, int16, uint32, int32, uint64, int64, "
               "float16, float32, float64)");
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::uint8_t> b, const std::string& origin) {
  static const std::uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (b.size() < 10 || !std::equal(magic, magic + 6, b.begin()))
    fail(origin, "not a .npy file (no \\x93NUMPY magic" + std::string(b.size() < 10 ? ", shorter than 10 bytes)" : ")"));
  const int major = b[6];
  std::size_t len = 0, start = 0;
  if (major == 1) {
    len = b[8] | static_cast<std::size_t>(b[9]) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail(origin, "truncated .npy header");
    len = b[8] | static_cast<std::size_t>(b[9]) << 8 | static_cast<std::size_t>(b[10]) << 16 |
          static_cast<std::size_t>(b[11]) << 24;
    start = 12;
  } else {
    fail(origin, "unsupported .npy version " + std::to_string(major) + "." + std::to_string(b[7]) +
                     " (valid: 1.0, 2.0, 3.0)");
  }
  if (len > b.size() - start)
    fail(origin, "truncated .npy header (" + std::to_string(len) + " bytes announced, " +
                     std::to_string(b.size() - start) + " present)");
  const std::string_view text(reinterpret_cast<const char*>(b.data() + start), len);
  NpyHeader h;
  h.data_offset = start + len;
  bool have_descr = false, have_order = false, have_shape = false;
  for (const DictParser::Entry& e : DictParser(text, origin).parse()) {
    if (e.key == "descr") {
      if (e.is_list) fail(origin, "structured dtype (a list of fields): unsupported, save one plain array per key");
      if (e.str.empty()) fail(origin, "malformed .npy header ('descr' is not a dtype string)");
      h.dtype = parse_descr(e.str, origin);
      have_descr = true;
    } else if (e.key == "fortran_order") {
      if (!e.flag) fail(origin, "malformed .npy header ('fortran_order' is not True or False)");
      if (*e.flag) fail(origin, "Fortran-ordered array: unsupported, save it C-ordered (np.ascontiguousarray)");
      have_order = true;
    } else if (e.key == "shape") {
      if (!e.is_tuple) fail(origin, "malformed .npy header ('shape' is not a tuple)");
      h.shape = e.tuple;
      have_shape = true;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    fail(origin, std::string("malformed .npy header (missing '") +
                     (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "')");
  return h;
}

RawArray npy_array(std::span<const std::uint8_t> bytes, std::shared_ptr<const void> keep, const std::string& origin) {
  const NpyHeader h = parse_npy_header(bytes, origin);
  RawArray a;
  a.dtype = h.dtype;
  a.shape = h.shape;
  a.origin = origin;
  const std::int64_t n = checked_numel(h.shape, dtype_bytes(h.dtype));
  if (n < 0) fail(origin, "shape " + a.shape_str() + " is too large");
  const std::uint64_t want = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(dtype_bytes(h.dtype));
  const std::uint64_t have = bytes.size() - h.data_offset;
  if (have < want)
    fail(origin, "truncated: shape " + a.shape_str() + " of " + dtype_name(h.dtype) + " needs " +
                     std::to_string(want) + " bytes of data, the file has " + std::to_string(have));
  if (have > want)
    fail(origin, std::to_string(have - want) + " bytes after the data of shape " + a.shape_str() + " of " +
                     dtype_name(h.dtype) + " (not a .npy file as NumPy writes it)");
  a.bytes = bytes.subspan(h.data_offset, static_cast<std::size_t>(want));
  a.keep = std::move(keep);
  return a;
}

RawArray read_npy(const std::string& path) {
  auto map = std::make_shared<MappedFile>(path);
  RawArray a = npy_array(map->bytes(), map, path);
  a.mapped = true;
  return a;
}

}  // namespace codistill::data
