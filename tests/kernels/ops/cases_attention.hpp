#pragma once
// Op cases of the gpt ops: embedding (gather forward, scatter-add backward, repeated ids)
// and the causal self-attention core (forward: y and the probabilities; backward: dqkv),
// odd sizes included: T = 1, T = 7, head_dim not a multiple of 4, one head; and flash attention
// (y and dqkv against the materialized op's, the log-sum-exp; no T x T tensor), from T = 1 to
// 2048, in float32, float64 and with bf16 compute. See op_case.hpp.
#include <tuple>

#include "op_case.hpp"

namespace codistill::test::ops {

class EmbeddingCase final : public OpCase {
 public:
  EmbeddingCase(std::int64_t rows, std::int64_t vocab, std::int64_t dim) : s_{rows, vocab, dim} {}
  std::string name() const override {
    return "embedding_forward+backward " + sizes({{"rows", s_.rows}, {"V", s_.vocab}, {"D", s_.dim}});
  }
  std::vector<Op> ops() const override { return {Op::embedding}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    // Ids drawn from the seed over the whole vocabulary: repeats when rows > vocab.
    std::vector<std::int32_t> idv(static_cast<std::size_t>(s_.rows));
    const auto u = uniform(idv.size(), seed, 0, static_cast<double>(s_.vocab));
    for (std::size_t i = 0; i < idv.size(); ++i) idv[i] = static_cast<std::int32_t>(u[i]);
    Tensor ids = c.labels(idv);
    Tensor table = c.random({s_.vocab, s_.dim}, seed + 1), y = c.poison({s_.rows, s_.dim});
    c.backend().embedding_forward(ids, table, y, s_, c.q);
    Tensor dy = c.random({s_.rows, s_.dim}, seed + 2), dtable = c.random({s_.vocab, s_.dim}, seed + 3);
    c.backend().embedding_backward(ids, dy, dtable, s_, c.q);
    return {c.out("y", y, c.bound()), c.out("dtable", dtable, c.bound(static_cast<double>(s_.rows)))};
  }

 private:
  k::EmbeddingShape s_;
};

// A table held as bf16 (Op::embedding_bf16_table): rows gathered into float32, exactly.
class EmbeddingBf16Case final : public OpCase {
 public:
  EmbeddingBf16Case(std::int64_t rows, std::int64_t vocab, std::int64_t dim) : s_{rows, vocab, dim} {}
  std::string name() const override {
    return "embedding_forward (bf16 table) " + sizes({{"rows", s_.rows}, {"V", s_.vocab}, {"D", s_.dim}});
  }
  std::vector<Op> ops() const override { return {Op::embedding_bf16_table}; }
  bool reproducible() const override { return true; }
  std::vector<Output> run(Ctx& c) const override {
    std::vector<std::int32_t> idv(static_cast<std::size_t>(s_.rows));
    const auto u = uniform(idv.size(), seed, 0, static_cast<double>(s_.vocab));
    for (std::size_t i = 0; i < idv.size(); ++i) idv[i] = static_cast<std::int32_t>(u[i]);
    Tensor ids = c.labels(idv);
    Tensor table = c.random_bf16({s_.vocab, s_.dim}, seed + 1), y = c.poison({s_.rows, s_.dim});
    c.backend().embedding_forward(ids, table, y, s_, c.q);
    return {c.out("y", y, 0.0)};  // a copy of bf16 values into float32: exact
  }

 private:
  k::EmbeddingShape s_;
};

class AttentionCase final : public OpCase {
 public:
  AttentionCase(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim)
      : s_{batch, seq, heads, head_dim} {}
  std::string name() const override {
    return "causal_attention_forward+backward " +
           sizes({{"B", s_.batch}, {"T", s_.seq}, {"H", s_.heads}, {"hd", s_.head_dim}});
  }
  std::vector<Op> ops() const override { return {Op::causal_attention}; }
  std::vector<Output> run(Ctx& c) const override {
    const std::int64_t rows = s_.rows(), D = s_.d_model();
    const Shape ps{s_.batch, s_.heads, s_.seq, s_.seq};
    Tensor qkv = c.random({rows, 3 * D}, seed, -2, 2), y = c.poison({rows, D}), probs = c.poison(ps);
    c.backend().attention_forward(qkv, y, probs, s_, c.q);
    Tensor dy = c.random({rows, D}, seed + 1), dqkv = c.poison({rows, 3 * D}), scratch = c.poison(ps);
    c.backend().attention_backward(qkv, probs, dy, dqkv, scratch, s_, c.q);
    const double terms = static_cast<double>(s_.seq * s_.head_dim);
    return {c.out("y", y, c.bound(terms)), c.out("probs", probs, c.bound(terms)),
            c.out("dqkv", dqkv, c.bound(2 * terms))};
  }

 private:
  k::AttentionShape s_;
};

class FlashAttentionCase final : public OpCase {
 public:
  FlashAttentionCase(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim)
      : s_{batch, seq, heads, head_dim} {}
  std::string name() const override {
    return "flash_attention_forward+backward " +
           sizes({{"B", s_.batch}, {"T", s_.seq}, {"H", s_.heads}, {"hd", s_.head_dim}});
  }
  std::vector<Op> ops() const override { return {Op::flash_attention}; }
  // On the reference queue y and dqkv come from the materialized op (the ground truth
  // flash attention must match), lse from flash attention's reference. With bf16 compute
  // all three from flash attention's reference, which rounds the operands the fast path
  // rounds at the same points (kernels/cpu/sequence/flash_attention.hpp; its agreement with
  // the materialized op on rounded inputs is tests/kernels/cpu/sequence/
  // test_flash_attention_bf16.cpp's), judged in the norm: the two compute P and dS a
  // float32 ulp apart and round an occasional one to the other bf16 neighbour (measured up
  // to 4.1e-5; any one rounding left out of the fast path 1.0e-3 or more).
  std::vector<Output> run(Ctx& c) const override {
    const bool bf16 = options.compute == k::Compute::bf16;
    const std::int64_t rows = s_.rows(), D = s_.d_model();
    Tensor qkv = c.random({rows, 3 * D}, seed, -2, 2), y = c.poison({rows, D});
    Tensor lse = c.poison({s_.batch, s_.heads, s_.seq});
    c.backend().flash_attention_forward(qkv, y, lse, s_, c.q);
    Tensor dy = c.random({rows, D}, seed + 1), dqkv = c.poison({rows, 3 * D});
    c.backend().flash_attention_backward(qkv, y, lse, dy, dqkv, s_, c.q);
    if (c.reference() && !bf16) {
      const Shape ps{s_.batch, s_.heads, s_.seq, s_.seq};
      Tensor probs = c.poison(ps), scratch = c.poison(ps);
      y = c.poison({rows, D}), dqkv = c.poison({rows, 3 * D});
      c.backend().attention_forward(qkv, y, probs, s_, c.q);
      c.backend().attention_backward(qkv, probs, dy, dqkv, scratch, s_, c.q);
    }
    const double terms = static_cast<double>(s_.seq * s_.head_dim);
    // lse is a log of O(T) terms, compared on the scale of 1 (it may pass through zero).
    return {c.out("y", y, c.bound(terms), kFloor, bf16), c.out("lse", lse, c.bound(terms), 1.0),
            c.out("dqkv", dqkv, c.bound(2 * terms), kFloor, bf16)};
  }

 private:
  k::AttentionShape s_;
};

inline Cases attention_cases() {
  Cases out;
  for (auto [rows, vocab, dim] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 3, 5},
                                  {64, 50, 33}, {300, 17, 128}, {2048, 1000, 16}})
    add<EmbeddingCase>(out, {DType::f32, DType::f64}, rows, vocab, dim);
  for (auto [rows, vocab, dim] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 3, 5},
                                  {2048, 1000, 16}})
    add<EmbeddingBf16Case>(out, {DType::f32}, rows, vocab, dim);
  for (auto [b, t, h, hd] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{1, 1, 1, 1},
                             {2, 1, 2, 4}, {2, 7, 2, 3}, {3, 7, 1, 5}, {1, 16, 4, 8}, {2, 33, 3, 17}, {4, 64, 4, 32}})
    add<AttentionCase>(out, {DType::f32, DType::f64}, b, t, h, hd);
  // Around the CPU's 128-row blocks (127, 129, 257) and CUDA's 64-row tiles (65), odd T (37,
  // 1023) and head dims (3, 65), CUDA's largest head_dim (128).
  for (auto [b, t, h, hd] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{1, 1, 1, 1},
                             {2, 1, 2, 3}, {2, 37, 3, 3}, {2, 65, 2, 128}, {1, 127, 2, 65}, {3, 129, 1, 5},
                             {2, 257, 2, 16}, {1, 1023, 2, 8}, {1, 2048, 1, 16}})
    add<FlashAttentionCase>(out, {DType::f32, DType::f64}, b, t, h, hd);
  // bf16 compute (train.precision: bf16), float32 tensors: the same sizes, odd small head dims
  // at the long lengths (the double reference is O(T^2 hd)).
  const std::size_t bf = out.size();
  for (auto [b, t, h, hd] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{1, 1, 1, 1},
                             {2, 1, 2, 3}, {2, 37, 3, 3}, {2, 65, 2, 128}, {1, 127, 2, 65}, {3, 129, 1, 5},
                             {2, 257, 2, 16}, {1, 1023, 2, 7}, {1, 2048, 1, 5}})
    add<FlashAttentionCase>(out, {DType::f32}, b, t, h, hd);
  for (std::size_t i = bf; i < out.size(); ++i) out[i]->options.compute = k::Compute::bf16;
  return out;
}

}  // namespace codistill::test::ops
