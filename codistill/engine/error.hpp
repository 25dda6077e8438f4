#pragma once
// A failure of the run itself (non-finite loss, unusable device, a peer training another
// model): the executables turn it into exit code 1.
#include <stdexcept>

namespace codistill {

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace codistill
