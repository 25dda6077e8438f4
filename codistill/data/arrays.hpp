#pragma once
// data.kind arrays: labelled examples the user brings as arrays (docs/data.md).
//
// data.path names one of three containers, each holding train_x, train_y, test_x, test_y:
//   a folder of four .npy files (train_x.npy, ...), memory-mapped;
//   an .npz archive (numpy.savez or savez_compressed) with those four keys;
//   an HDF5 file with those four datasets at its root (h5py's create_dataset).
// x: uint8, float16, bfloat16 (HDF5 only), float32 or float64, shape [N, F] (F features:
// an example of shape [F, 1, 1]), [N, H, W] (one channel), or [N, H, W, C] / [N, C, H, W]
// as data.layout says (nhwc, NumPy's image convention, or nchw). y: integers, shape [N],
// in [0, classes) where classes is data.classes, or the largest label + 1 when that is 0.
// uint8 examples are pixels: normalize unit divides them by 255; floating ones are taken
// as they are (unit divides by 1).
//
// Errors are std::runtime_error naming the file, the key, and the dtype or shape at fault
// (std::invalid_argument for a config value such as data.layout).
#include "codistill/data/dataset.hpp"

namespace codistill::data {

// The two splits, raw (not normalized); raw_max is set to what "unit" divides by.
Splits load_arrays(const DataConfig& cfg, double& raw_max);

}  // namespace codistill::data
