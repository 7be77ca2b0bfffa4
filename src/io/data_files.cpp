// data_files.cpp: make_dataset, the data set of any data.type (the files' readers or the model's generated data).
#include "pipetrain/io/data_files.hpp"

#include "pipetrain/base/error.hpp"

namespace pt {

std::unique_ptr<Dataset> make_dataset(const DataSetConfig& config, Split split) {
  switch (config.data.type) {
    case DataKind::Hdf5: return make_hdf5_dataset(config, split);
    case DataKind::ImageFiles: return make_image_file_dataset(config, split);
    case DataKind::Synthetic:
    case DataKind::Markov:
    case DataKind::Images: return make_generated_dataset(config, split);
  }
  PT_FAIL("unknown data type");
}

}  // namespace pt
