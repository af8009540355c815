// Baechi's m-TOPO (Jeon et al., SoCC 2020; beomyeol/baechi placer/m_topo.py): groups in topological
// order fill device 0 until the next one does not fit, then device 1, and so on.
#pragma once

#include "placer/baselines/problem.h"

namespace placer::baselines {

struct MTopoOptions {
  // Baechi's "uniform" variant caps every device but the last at
  //   (sum of the groups' memory) / (number of devices) + (the largest group's memory),
  // on top of its capacity. It is the default because without memory pressure the plain variant
  // puts every group on device 0, which is only a single-device baseline. The cap counts the
  // groups' own memory; it cannot make m-TOPO fail, since each device but the last takes more than
  // its even share before moving on.
  bool uniform = true;
};

// Throws BaselineError naming the group and the last device when the groups do not fit in order.
BaselineResult MTopo(const PlacementProblem& problem, const MTopoOptions& options = {});

}  // namespace placer::baselines
