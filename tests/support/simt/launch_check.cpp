// The launch limits a GPU enforces (executor.hpp's Limits), checked before a launch runs.
#include <string>

#include "simt/executor.hpp"

namespace simt {

void check_launch(const LaunchConfig& cfg) {
  const auto fail = [](const std::string& m) { throw LaunchError("launch refused: " + m); };
  const unsigned b[3] = {cfg.block.x, cfg.block.y, cfg.block.z};
  const unsigned g[3] = {cfg.grid.x, cfg.grid.y, cfg.grid.z};
  const char* axis = "xyz";
  for (int i = 0; i < 3; ++i) {
    if (b[i] == 0) fail(std::string("block.") + axis[i] + " is 0");
    if (g[i] == 0) fail(std::string("grid.") + axis[i] + " is 0");
    if (b[i] > Limits::max_block[i])
      fail(std::string("block.") + axis[i] + " = " + std::to_string(b[i]) + " exceeds " +
           std::to_string(Limits::max_block[i]));
    if (g[i] > Limits::max_grid[i])
      fail(std::string("grid.") + axis[i] + " = " + std::to_string(g[i]) + " exceeds " +
           std::to_string(Limits::max_grid[i]));
  }
  const unsigned long long threads = 1ull * b[0] * b[1] * b[2];
  if (threads > Limits::max_threads)
    fail(std::to_string(threads) + " threads per block exceed " +
         std::to_string(Limits::max_threads));
  const std::size_t cap = cfg.smem_opt_in ? Limits::opt_in_smem : Limits::default_smem;
  if (cfg.dynamic_smem > cap)
    fail(std::to_string(cfg.dynamic_smem) + " bytes of dynamic shared memory exceed " +
         std::to_string(cap) +
         (cfg.smem_opt_in ? " (the opt-in maximum)"
                          : " (48 KiB without cudaFuncAttributeMaxDynamicSharedMemorySize)"));
}

}  // namespace simt
