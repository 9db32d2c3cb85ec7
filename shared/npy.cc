#include "shared/npy.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "shared/error.h"

namespace pstrain {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

}  // namespace

std::string shape_text(const std::vector<size_t>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  const size_t unpadded = 10 + dict.size() + 1;  // magic(6) ver(2) len(2) dict '\n'
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  size_t count = 1;
  for (size_t d : shape) count *= d;

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write '" + tmp + "'");
    const unsigned char header_len[2] = {static_cast<unsigned char>(dict.size() & 0xff),
                                         static_cast<unsigned char>(dict.size() >> 8)};
    out.write(kMagic, 6);
    out.put('\x01');
    out.put('\x00');
    out.write(reinterpret_cast<const char*>(header_len), 2);
    out << dict;
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename '" + tmp + "' to '" + path + "'");
}

std::vector<float> read_npy(const std::string& path, std::vector<size_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open '" + path + "'");
  char magic[8] = {};
  unsigned char len[2] = {};
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(len), 2);
  if (!in || std::string(magic, 6) != std::string(kMagic, 6) || magic[6] != 1) {
    throw Error("'" + path + "' is not a version 1 .npy file");
  }
  std::string dict(static_cast<size_t>(len[0] | (len[1] << 8)), '\0');
  in.read(&dict[0], static_cast<std::streamsize>(dict.size()));
  if (dict.find("'descr': '<f4'") == std::string::npos ||
      dict.find("'fortran_order': False") == std::string::npos) {
    throw Error("'" + path + "' is not float32 C-order");
  }
  const size_t open = dict.find('(', dict.find("'shape'"));
  const size_t close = dict.find(')', open);
  if (open == std::string::npos || close == std::string::npos) throw Error("'" + path + "': no shape");
  shape->clear();
  std::stringstream dims(dict.substr(open + 1, close - open - 1));
  std::string item;
  size_t count = 1;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    shape->push_back(std::stoul(item));
    count *= shape->back();
  }
  std::vector<float> data(count);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) throw Error("'" + path + "' is truncated");
  return data;
}

}  // namespace pstrain
