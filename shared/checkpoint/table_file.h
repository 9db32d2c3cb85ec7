// One embedding table's saved bytes (docs/sparse.md, "Checkpoint format": what a PS shard writes to
// DIR/embeddings/<table>.shard<s>-of-<S> and into its checkpoint file), both ways. The one reader
// of the format: the PS (ps/sparse/table_codec.cc: checkpoints and --resume, which then checks the
// file against its own table), the worker (--evaluate and --predict of a CTR model read the saved
// rows) and pstrain-export (which names a checkpoint's tables by their header). Pure functions of
// bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/util/byte_reader.h"
#include "shared/util/file_util.h"

namespace pstrain {

struct SavedTableHeader {
  uint32_t format = 0;
  uint32_t table = 0;       // the table's id
  uint64_t dim = 0;         // weights per row
  uint32_t slots = 0;       // the optimizer's slots per row, each dim floats
  std::string name;         // "ids", "C1", ...
  std::string optimizer;    // sgd | adagrad | adam | ftrl
  uint64_t rows = 0, sightings = 0;
};

struct SavedRow {
  uint64_t id = 0;
  uint64_t last_touched = 0;  // the last step that updated (or created) the row
  uint64_t updates = 0;       // updates applied to the row (lazy Adam's t)
};

// An ID seen but not admitted yet (min_count > 1).
struct SavedSighting {
  uint64_t id = 0;
  uint32_t count = 0;  // >= 1
  uint64_t last_seen = 0;
};

struct SavedTable {
  SavedTableHeader header;
  std::vector<SavedRow> rows;            // IDs increasing
  std::vector<float> values;             // per row: its weights (dim floats), then with kAll its slots
  std::vector<SavedSighting> sightings;  // IDs increasing, none of them a row's; kAll only
};

// What read_saved_table keeps: the header only, the rows' IDs and weights, or everything.
enum class SavedTableParts { kHeader, kWeights, kAll };

// Decodes a table's bytes, checking the CRC-32C, the magic and format, dim and slots in range,
// that the sizes add up exactly, strictly increasing IDs, finite values (slots included), and
// sightings of count >= 1 whose IDs are no row's. False, with *error saying what is wrong
// ("checksum mismatch (corrupted)", ...), otherwise. Whatever `parts` keeps, everything is checked.
bool read_saved_table(const std::string& bytes, SavedTable* out, std::string* error,
                      SavedTableParts parts = SavedTableParts::kAll);

// A table read as a stream (shared/util/byte_reader.h: from its place in a checkpoint's shard
// file, say) hands out, as it goes, its header, each row (its weights, then its optimizer slots:
// (1 + slots) * dim floats, all finite) and each sighting, IDs increasing; any may be empty. They
// come before the table's checksum is known: whoever keeps them drops them if the read fails.
struct SavedTableVisitor {
  std::function<void(const SavedTableHeader&)> header;
  std::function<void(const SavedRow&, const float* values)> row;
  std::function<void(const SavedSighting&)> sighting;
};
// The table of `in`'s bytes from its position to its end, with every check (and error text) of
// read_saved_table below, in one pass through `in`'s bounded buffer (and a second reader of the
// rows' IDs where sightings are saved): a table of gigabytes is checked or loaded without being
// held. A read of the file that fails is the error, naming the file and the errno text.
bool read_saved_table(ByteReader& in, const SavedTableVisitor& visit, std::string* error);

// The bytes a table of `header` (its rows and sightings counts) takes, as SavedTableWriter
// writes it.
uint64_t saved_table_size(const SavedTableHeader& header);

// Writes a table's bytes to `out` as they are made: the header, then header.rows rows and
// header.sightings sightings, each in increasing ID order, then finish() the checksum (computed
// as the bytes go). Rows are written from wherever they live (the PS's arena) through a buffer
// of at most 64 KiB, so that a save to a file holds no second copy of the table.
class SavedTableWriter {
 public:
  SavedTableWriter(const SavedTableHeader& header, ByteSink* out);
  void row(const SavedRow& row, const float* values);  // (1 + slots) * dim floats
  void sighting(const SavedSighting& s);
  void finish();

 private:
  void put(uint64_t v, size_t bytes);
  void flush();

  ByteSink* const out_;
  const size_t row_floats_;
  uint64_t rows_left_, sightings_left_;
  std::string buffer_;
  uint32_t crc_ = 0;  // CRC-32C of the bytes flushed so far
};

// A whole SavedTable read with kAll, written back: the same bytes (tests, seeds, the fuzzer).
std::string encode_saved_table(const SavedTable& t);

}  // namespace pstrain
