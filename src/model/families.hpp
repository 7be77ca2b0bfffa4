// families.hpp: the built-in model families, each defined in its own file
// (family_mlp.cpp, family_gpt.cpp, family_cnn.cpp) and listed by the registry (family.cpp).
// Private to src/model.
#pragma once

#include "pipetrain/model/family.hpp"

namespace pt {

ModelFamily mlp_family();
ModelFamily gpt_family();
ModelFamily cnn_family();

}  // namespace pt
