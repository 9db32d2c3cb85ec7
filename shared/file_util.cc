#include "shared/file_util.h"

#include <cstdio>
#include <fstream>

#include "shared/error.h"

namespace pstrain {

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename '" + tmp + "' to '" + path + "'");
}

}  // namespace pstrain
