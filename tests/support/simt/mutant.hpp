#pragma once
// Mutants of the kernels' collectives without recompiling them: the shim passes every
// __syncthreads, __syncwarp, shuffle and vote its call site (file, line, column), and the
// environment variable SIMT_MUTANT names one site to treat as if its source were edited:
//
//   SIMT_MUTANT=<file>:<line>[:<from>-<to>]:<kind>
//     file   the header's path, or its tail from a '/' ("reduce.cuh",
//            "kernels/cuda/device/reduce.cuh")
//     line   its line; every template instance of that line is mutated, as an edit would
//     from-to  optional, to pick one of several calls on the line: the columns from the
//            call's name to its '(' (GCC reports the one, clang the other)
//     kind   removed      __syncthreads / __syncwarp: the line deleted (no wait, no switch)
//            no-exchange  shuffle / vote: each lane gets its own value (its own predicate),
//                         as if the exchange were taken out of the line
//            mask-halved  warp collective: mask & 0x0000ffff (the lower half of the lanes)
//
// SIMT_MUTANT_HITS=<path>: where the first hit ("reached ...") and, at exit, the hit count
// are appended; without it they go to stderr. A mutant nobody reaches says so at exit. The
// CTest entries of tests/simt_mutants.cmake run the SIMT suite this way
// (tests/simt/run_mutant.sh).
#include <cstdint>
#include <string>

#include "simt/runtime.hpp"

namespace simt::detail {

enum class Mutation { none, removed, no_exchange, mask_halved };
// The collectives by what a mutant may do to them.
enum class Call { syncthreads, syncwarp, exchange /* shuffles and votes */ };

// What the mutant does to a call at `at`; counts a hit when it applies. Throws
// std::invalid_argument for a malformed spec or a kind that does not apply to the call
// (removed on a shuffle, no-exchange on a barrier, mask-halved on __syncthreads).
Mutation mutation_at(const Site& at, Call call);

// The result of a warp collective whose exchange was taken out (removed, no-exchange): the
// calling lane's own value for a shuffle, its own predicate for a vote.
std::uint64_t without_exchange(Collective kind, std::uint64_t bits, unsigned lane);

// For the executor's own tests: replaces SIMT_MUTANT's spec ("" for none), hits reset.
void set_mutant(const std::string& spec);
std::uint64_t mutant_hits();

}  // namespace simt::detail
