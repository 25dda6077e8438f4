#pragma once
// The layers whose arithmetic depends on how a 4-D image map [B, C, H, W] lies in memory:
// NCHW (each channel's plane contiguous; the default) or channels-last, NHWC (each pixel's
// channels contiguous: oneDNN's CPU convolutions run on it without reordering). The logical
// shapes are the same either way; elementwise layers (activations, residual adds, dropout)
// do not care. A model switches every such layer of its tree at once
// (Model::set_memory_format), never one alone: the layers between them must agree.
namespace codistill {

class ChannelsLastLayer {
 public:
  virtual ~ChannelsLastLayer() = default;
  void set_channels_last(bool on) { channels_last_ = on; }
  bool channels_last() const { return channels_last_; }

 protected:
  bool channels_last_ = false;
};

}  // namespace codistill
