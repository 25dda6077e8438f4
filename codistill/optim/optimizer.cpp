// make_optimizer: the kind-keyed optimizer factory (tiny-cuda-nn style: unknown kinds throw
// with the list of valid ones).
#include "codistill/optim/optimizer.hpp"

#include <stdexcept>

#include "codistill/optim/adamw.hpp"
#include "codistill/optim/sgd.hpp"

namespace codistill {

std::vector<std::string> optimizer_kinds() { return {"adamw", "sgd"}; }

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<NamedParam> params) {
  if (cfg.kind == "sgd")
    return std::make_unique<SGD>(std::move(params), cfg.momentum, cfg.nesterov, cfg.weight_decay);
  if (cfg.kind == "adamw")
    return std::make_unique<AdamW>(std::move(params), cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
  std::string valid;
  for (const auto& k : optimizer_kinds()) valid += (valid.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown optimizer kind '" + cfg.kind + "' (valid: " + valid + ")");
}

}  // namespace codistill
