// The mutant switch of the SIMT executor (see mutant.hpp).
#include "simt/mutant.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string_view>

namespace simt::detail {
namespace {

struct Spec {
  std::string text, file;
  unsigned line = 0, from = 0, to = 0;  // from = 0: any column
  Mutation kind = Mutation::none;
  std::string error;  // a malformed spec: thrown at the first collective
};

struct State {
  std::mutex mutex;  // guards spec (set_mutant) and the report
  Spec spec;
  std::atomic<bool> active{false};
  std::atomic<std::uint64_t> hits{0};
  bool announce = false;     // the spec came from SIMT_MUTANT (not set_mutant): report hits
  std::string report_path;  // SIMT_MUTANT_HITS; empty: stderr
};

Spec parse(const std::string& text) {
  Spec s;
  s.text = text;
  const auto bad = [&](const char* why) {
    s.error = "SIMT_MUTANT='" + text + "': " + why +
              " (expected <file>:<line>[:<from>-<to>]:removed|no-exchange|mask-halved)";
    return s;
  };
  const auto last = text.rfind(':');
  if (last == std::string::npos) return bad("no kind");
  const std::string kind = text.substr(last + 1);
  if (kind == "removed") s.kind = Mutation::removed;
  else if (kind == "no-exchange") s.kind = Mutation::no_exchange;
  else if (kind == "mask-halved") s.kind = Mutation::mask_halved;
  else return bad("unknown kind");
  std::string rest = text.substr(0, last);
  auto colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find('-', colon) != std::string::npos) {
    if (std::sscanf(rest.c_str() + colon + 1, "%u-%u", &s.from, &s.to) != 2 || s.from == 0 ||
        s.to < s.from)
      return bad("bad column range");
    rest.resize(colon);
    colon = rest.rfind(':');
  }
  if (colon == std::string::npos || colon == 0) return bad("no file or line");
  char* end = nullptr;
  const unsigned long line = std::strtoul(rest.c_str() + colon + 1, &end, 10);
  if (line == 0 || *end != '\0') return bad("bad line");
  s.line = static_cast<unsigned>(line);
  s.file = rest.substr(0, colon);
  return s;
}

void report(State& st, const std::string& line) {
  if (st.report_path.empty()) {
    std::fprintf(stderr, "simt: %s\n", line.c_str());
    return;
  }
  if (std::FILE* f = std::fopen(st.report_path.c_str(), "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

State& state();

void report_at_exit() {
  State& st = state();
  const std::lock_guard lock(st.mutex);
  if (!st.announce) return;
  const auto n = st.hits.load();
  report(st, n ? "mutant " + st.spec.text + ": " + std::to_string(n) + " hits"
               : "mutant " + st.spec.text + " was never reached");
}

// Never destroyed: report_at_exit runs after static destructors may have.
State& state() {
  static State* st = [] {
    auto* s = new State;
    const char* env = std::getenv("SIMT_MUTANT");
    if (!env || !*env) return s;
    if (const char* path = std::getenv("SIMT_MUTANT_HITS")) s->report_path = path;
    s->spec = parse(env);
    s->active = s->announce = true;
    std::atexit(report_at_exit);
    return s;
  }();
  return *st;
}

// `file` names the header itself: it is spec.file, or ends with '/' and spec.file.
bool same_file(std::string_view file, std::string_view tail) {
  return file.ends_with(tail) &&
         (file.size() == tail.size() || file[file.size() - tail.size() - 1] == '/');
}

const char* call_name(Call c) {
  return c == Call::syncthreads ? "__syncthreads" : c == Call::syncwarp ? "__syncwarp" : "a shuffle or vote";
}

}  // namespace

Mutation mutation_at(const Site& at, Call call) {
  State& st = state();
  if (!st.active.load(std::memory_order_relaxed)) return Mutation::none;
  const Spec& s = st.spec;
  if (!s.error.empty()) throw std::invalid_argument(s.error);
  if (at.line != s.line || (s.from && (at.column < s.from || at.column > s.to)) ||
      !same_file(at.file, s.file))
    return Mutation::none;
  const bool fits = s.kind == Mutation::removed       ? call != Call::exchange
                    : s.kind == Mutation::no_exchange ? call == Call::exchange
                                                      : call != Call::syncthreads;
  if (!fits)
    throw std::invalid_argument("SIMT_MUTANT='" + s.text + "' does not apply to " + call_name(call) +
                                " at " + at.file + ":" + std::to_string(at.line));
  if (st.hits.fetch_add(1) == 0 && st.announce) {
    const std::lock_guard lock(st.mutex);
    report(st, "mutant " + s.text + " reached at " + at.file + ":" + std::to_string(at.line) + ":" +
                   std::to_string(at.column));
  }
  return s.kind;
}

std::uint64_t without_exchange(Collective kind, std::uint64_t bits, unsigned lane) {
  switch (kind) {
    case Collective::syncwarp: return 0;
    case Collective::ballot: return bits ? 1ull << lane : 0;
    case Collective::any:
    case Collective::all: return bits != 0;
    default: return bits;
  }
}

void set_mutant(const std::string& spec) {
  State& st = state();
  const std::lock_guard lock(st.mutex);
  st.active = st.announce = false;
  st.hits = 0;
  st.spec = spec.empty() ? Spec{} : parse(spec);
  st.active = !spec.empty();
}

std::uint64_t mutant_hits() { return state().hits.load(); }

}  // namespace simt::detail
