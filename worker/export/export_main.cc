// pstrain-export: a checkpoint as the files --save-params writes (docs/models.md, "Using a
// trained model").
#include <boost/program_options.hpp>

#include <iostream>
#include <sstream>
#include <string>

#include "shared/util/error.h"
#include "shared/util/run_main.h"
#include "worker/export/export.h"
#include "worker/export/export_formats.h"

namespace po = boost::program_options;

namespace {

std::vector<int> parse_widths(const std::string& text) {
  std::vector<int> widths;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) {
      throw pstrain::UsageError("--hidden: '" + part + "' is not a width");
    }
    widths.push_back(std::stoi(part));
  }
  return widths;
}

std::vector<size_t> parse_shape(const std::string& text) {
  std::vector<size_t> shape;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos || std::stoul(part) == 0) {
      throw pstrain::UsageError("--input-shape: '" + text + "' is not CxHxW or D (e.g. 1x28x28, 784)");
    }
    shape.push_back(std::stoul(part));
  }
  if (shape.empty() || shape.size() > 3) throw pstrain::UsageError("--input-shape: '" + text + "' is not CxHxW or D");
  return shape;
}

}  // namespace

int main(int argc, char** argv) {
  return pstrain::run_main("pstrain-export", [&]() -> int {
    pstrain::ExportOptions o;
    std::string hidden, input_shape, format = "npy";
    po::options_description visible("Options");
    visible.add_options()("help,h", "print this help and exit")(
        "format", po::value(&format)->default_value(format),
        "npy: OUT is a directory of <variable>.npy files and model.json, as --save-params writes them; npz: OUT is "
        "one .npz archive of the same files (numpy.load reads it); npz-arrays: OUT is one .npz of plain arrays, every "
        "variable, each embedding table as embedding.<table>.ids (int64) and embedding.<table>.rows (float32, rows x "
        "dim), and model.json (with the feature transform and the keys: what tools/ctr_score.py needs to score data); "
        "safetensors: the same arrays in one safetensors file, model.json in its metadata (pstrain_model). These two "
        "also take a --save-params directory as CHECKPOINT_DIR")(
        "model", po::value(&o.model),
        "only for a checkpoint without model.json (written before pstrain recorded the model): its layer list")(
        "hidden", po::value(&hidden), "only for such a checkpoint: the MLP's hidden widths, e.g. 256,128")(
        "input-shape", po::value(&input_shape),
        "only for such a checkpoint: one sample's shape, CxHxW or D (e.g. 1x28x28 for IDX images)");
    po::options_description all;
    all.add(visible).add_options()("checkpoint", po::value(&o.checkpoint))("out", po::value(&o.out));
    po::positional_options_description positional;
    positional.add("checkpoint", 1).add("out", 1);
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw pstrain::UsageError(e.what());
    }
    if (vm.count("help")) {
      std::cout << "Usage: pstrain-export CHECKPOINT_DIR OUT [options]\n"
                << "Writes the parameters of the newest complete checkpoint in CHECKPOINT_DIR (a --checkpoint-dir;\n"
                << "or one of its v<step> directories: that checkpoint) as --save-params writes them, for\n"
                << "--init-params, --evaluate and --predict, or numpy/PyTorch (docs/models.md); or, with --format\n"
                << "npz-arrays or safetensors, as plain arrays for tools/ctr_score.py, numpy or PyTorch\n"
                << "(CHECKPOINT_DIR may then be a --save-params directory too).\n"
                << visible << "\n";
      return 0;
    }
    if (o.checkpoint.empty() || o.out.empty()) throw pstrain::UsageError("needs CHECKPOINT_DIR and OUT");
    if (!pstrain::export_format_of(format, &o.format)) {
      throw pstrain::UsageError("--format: '" + format + "' is not npy, npz, npz-arrays or safetensors");
    }
    o.hidden_given = vm.count("hidden") > 0;
    if (o.hidden_given) o.hidden = parse_widths(hidden);
    if (!input_shape.empty()) o.input_shape = parse_shape(input_shape);
    pstrain::export_checkpoint(o);
    return 0;
  });
}
