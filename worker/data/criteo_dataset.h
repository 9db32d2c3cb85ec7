// A data set of one Criteo TSV file (docs/data.md, "Criteo (CTR) data"), parsed once into a cache
// file of fixed-size binary records (and the IDs of fields that list several) and then read back
// by pread, so a reader's memory does not grow with the file.
#pragma once

#include <memory>
#include <string>

#include "worker/data/dataset.h"
#include "worker/data/records.h"

namespace pstrain {

// Read through the CTR cache (worker/data/ctr_cache.h), in its Criteo layout (magic PSCTR02). A
// file of 39-field lines (no label) opens with labelled() false: input to --predict only.
// As a Dataset: the 13 dense features (worker/data/criteo.h, criteo_dense_value) are the
// features, sample_shape() {13}; labels 0 and 1; num_classes() labels_range.classes, else 2;
// id_fields() 26 and read_ids() the categorical fields, each one ID or a list. The file (plain
// or gzip) is parsed once into a cache file in cache_dir, named like the CSV reader's (its
// source's path, size, mtime), written under a temporary name and renamed into place; a cache of
// another format version is parsed anew. A line that does not parse throws
// pstrain::Error "<path>:<line>: <what is wrong>" (nothing is cached); with `skip_bad_lines` such
// lines are left out, counted, and the count logged at every open. Also an error: an empty
// file, no valid line, truncated or corrupt gzip data, a cache written by a --skip-bad-lines run
// that skipped lines when skip_bad_lines is false (its first bad line's message is thrown).
std::unique_ptr<Dataset> open_criteo_dataset(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range);

}  // namespace pstrain
