#include "test_util/network.h"

#include "shared/util/error.h"
#include "worker/model/model.h"

namespace pstrain::test {

std::string network_error(const std::string& spec, const std::vector<size_t>& shape, int classes) {
  try {
    Network net(spec, shape, classes);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

double central_difference(std::vector<float>& x, size_t i, float h, const std::function<double()>& f) {
  const float saved = x[i];
  x[i] = saved + h;
  const double up = f();
  x[i] = saved - h;
  const double down = f();
  x[i] = saved;
  return (up - down) / (2.0 * double{h});
}

}  // namespace pstrain::test
