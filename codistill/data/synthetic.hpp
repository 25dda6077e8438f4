#pragma once
// A synthetic classification task: a mixture of isotropic Gaussians, one per class.
//
// Class k has mean m_k (the same for every worker: drawn from Rng(data.synthetic_seed)),
// and an example of class k is m_k + data.synthetic_noise * N(0, I), shaped
// data.synthetic_shape = [C, H, W]. Labels are balanced (counts differ by at most one)
// and in random order. It needs no files, takes milliseconds to build, and its best
// possible accuracy is known, which makes it the dataset of unit and process tests.
//
// Difficulty: each mean has i.i.d. N(0, s^2) components with s = kSyntheticSeparation /
// sqrt(2 D), D = C * H * W, so two class means lie about kSyntheticSeparation apart
// whatever D is. With separation 4 and noise 1, a pair of classes is confused with
// probability Phi(-2) ~ 2.3%, and with 10 classes the Bayes classifier (which is linear
// here: nearest mean) reaches about 87% (measured for D = 48, 64 and 784 and several
// seeds): clearly learnable, not trivial, and a model that has seen little data has
// room to gain from distillation or ensembling. Noise 2 brings the Bayes rate to ~48%.
#include "codistill/data/data_options.hpp"
#include "codistill/data/dataset.hpp"
#include "kernels/tensor.hpp"

namespace codistill::data {

inline constexpr double kSyntheticSeparation = 4.0;

// The class means, float32 [classes, C, H, W]. Throws std::invalid_argument naming the
// config key for an invalid synthetic_* value.
kernels::Tensor synthetic_means(const DataConfig& cfg);

// Both splits, raw (not limited, not normalized; normalization.kind == "none").
// The training split draws from stream (synthetic_seed, 1) and the test split from
// (synthetic_seed, 2), so the test set does not change when synthetic_train does.
Splits make_synthetic(const DataConfig& cfg);

}  // namespace codistill::data
