// ByteReader (shared/util/byte_reader.h) and the tables read through it: a file's range read in
// pieces gives its bytes exactly, its failures name the file and the errno text, and a table
// read where it lies in a file is checked and handed out as read_saved_table reads its bytes.
#include "shared/util/byte_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "shared/checkpoint/table_file.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain {
namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ByteReaderTest, AFilesRangeReadInPiecesIsItsBytes) {
  const TempDir dir("byte-reader");
  std::string bytes(3 * ByteReader::kBufferBytes + 123, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  write(dir.path + "/f", bytes);
  const std::string range = bytes.substr(5, bytes.size() - 10);
  ByteReader in(dir.path + "/f", 5, range.size());
  ASSERT_EQ(in.error(), "");
  std::string got;
  for (size_t piece : {size_t{7}, ByteReader::kBufferBytes + 3, size_t{1}, ByteReader::kBufferBytes - 1}) {
    std::string part(piece, '\0');
    ASSERT_TRUE(in.read(part.data(), piece)) << in.error();
    got += part;
  }
  ByteReader again(in, 1000);  // a second reader of the range, from position 1000
  std::string rest(in.left(), '\0');
  ASSERT_TRUE(in.read(rest.data(), rest.size())) << in.error();
  got += rest;
  EXPECT_TRUE(got == range);
  char one = 0;
  EXPECT_FALSE(in.read(&one, 1));  // at the end: nothing consumed, no error
  EXPECT_EQ(in.error(), "");
  std::string from(10, '\0');
  ASSERT_TRUE(again.read(from.data(), from.size()));
  EXPECT_EQ(from, range.substr(1000, 10));
  ASSERT_TRUE(again.skip(ByteReader::kBufferBytes * 2));
  ASSERT_TRUE(again.read(from.data(), from.size()));
  EXPECT_EQ(from, range.substr(1010 + ByteReader::kBufferBytes * 2, 10));
  ByteReader text(bytes);
  std::string head(5, '\0');
  ASSERT_TRUE(text.read(head.data(), 5));
  EXPECT_EQ(head, bytes.substr(0, 5));
}

TEST(ByteReaderTest, FailuresNameTheFileAndTheReason) {
  const TempDir dir("byte-reader-errors");
  ByteReader missing(dir.path + "/none", 0, 10);
  char b[4];
  EXPECT_FALSE(missing.read(b, 4));
  EXPECT_EQ(missing.error(), "cannot open " + dir.path + "/none: No such file or directory");
  write(dir.path + "/short", "abc");
  ByteReader cut(dir.path + "/short", 0, 10);  // the range promises more than the file holds
  EXPECT_FALSE(cut.read(b, 4));
  EXPECT_EQ(cut.error(), "cannot read " + dir.path + "/short: it ended early (truncated)");
  ByteReader directory(dir.path, 0, 10);
  EXPECT_FALSE(directory.read(b, 4));
  EXPECT_EQ(directory.error(), "cannot read " + dir.path + ": Is a directory");
}

// A table of rows and sightings (the merge of the two reads the rows' IDs again where they lie).
SavedTable a_table() {
  SavedTable t;
  t.header.format = 1;
  t.header.table = 3;
  t.header.dim = 4;
  t.header.slots = 1;
  t.header.name = "ids";
  t.header.optimizer = "adagrad";
  for (uint64_t i = 0; i < 50000; ++i) {  // 2.4 MB: past the reader's buffer
    t.rows.push_back(SavedRow{i * 3 + 1, i % 7, i % 5});
    for (int j = 0; j < 8; ++j) t.values.push_back(0.25f * static_cast<float>(j) - static_cast<float>(i % 3));
  }
  for (uint64_t id : {0ull, 5ull, 149999ull, 200000ull}) t.sightings.push_back(SavedSighting{id, 2, 9});
  return t;
}

TEST(ByteReaderTest, ATableReadWhereItLiesInAFileIsReadAsItsBytes) {
  const TempDir dir("byte-reader-table");
  const std::string bytes = encode_saved_table(a_table());
  write(dir.path + "/f", "head" + bytes + "tail");
  std::vector<SavedRow> rows;
  std::vector<float> values;
  std::vector<SavedSighting> sightings;
  SavedTableHeader header;
  SavedTableVisitor visit;
  visit.header = [&](const SavedTableHeader& h) { header = h; };
  visit.row = [&](const SavedRow& r, const float* v) {
    rows.push_back(r);
    values.insert(values.end(), v, v + 8);
  };
  visit.sighting = [&](const SavedSighting& s) { sightings.push_back(s); };
  ByteReader in(dir.path + "/f", 4, bytes.size());
  std::string error;
  ASSERT_TRUE(read_saved_table(in, visit, &error)) << error;
  SavedTable want;
  ASSERT_TRUE(read_saved_table(bytes, &want, &error)) << error;
  EXPECT_EQ(header.name, "ids");
  EXPECT_EQ(header.rows, 50000u);
  ASSERT_EQ(rows.size(), want.rows.size());
  EXPECT_EQ(rows.back().id, want.rows.back().id);
  EXPECT_TRUE(values == want.values);
  ASSERT_EQ(sightings.size(), 4u);
  EXPECT_EQ(sightings[2].id, 149999u);

  // A sighting of a held ID (148 = 3 x 49 + 1, row 49's) is refused alike, and a flipped byte
  // is a checksum mismatch either way, whatever the checks before the checksum made of it.
  SavedTable held = a_table();
  held.sightings[1].id = 148;
  const std::string held_bytes = encode_saved_table(held);
  std::string flipped = bytes;
  flipped[100000] ^= 0x40;
  for (const auto& [table, why] :
       {std::pair<std::string, std::string>{held_bytes, "a sighting of a held ID, or of count 0"},
        {flipped, "checksum mismatch (corrupted)"}}) {
    write(dir.path + "/g", table);
    ByteReader g(dir.path + "/g", 0, table.size());
    EXPECT_FALSE(read_saved_table(g, SavedTableVisitor{}, &error));
    EXPECT_EQ(error, why);
    SavedTable back;
    EXPECT_FALSE(read_saved_table(table, &back, &error));
    EXPECT_EQ(error, why);
  }
}

}  // namespace
}  // namespace pstrain
