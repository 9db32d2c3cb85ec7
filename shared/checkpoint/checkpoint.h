// Checkpoint files (docs/checkpoints.md): one per PS shard and version, plus a manifest that the
// chief writes once every shard has written its file. Encoders and decoders are pure functions
// of bytes, so the decoders (which read files that may be truncated, corrupted or from another
// job) are unit-tested byte by byte and fuzzed (tests/fuzz/checkpoint_fuzz.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/file_util.h"

namespace pstrain {

constexpr uint32_t kCheckpointFormat = 1;
constexpr uint32_t kCheckpointFormatWithTables = 2;  // a shard file that also holds embedding tables

// Where an embedding table lies in a shard file: ByteReader(path, offset, bytes) reads it.
struct TableInFile {
  std::string path;
  uint64_t offset = 0, bytes = 0;
};

// One shard's state at a version: its slice of the flat vector and the optimizer's slots for it.
struct ShardCheckpoint {
  uint32_t shard = 0, num_shards = 1;
  uint64_t version = 0;      // parameter version = steps applied
  uint64_t total = 0;        // floats of the whole flat vector
  uint64_t total_steps = 0;  // the job's length (learning-rate schedule)
  uint64_t offset = 0;       // the slice: [offset, offset + values.size())
  std::string optimizer;     // sgd | momentum | adam
  std::vector<float> values;
  std::vector<std::vector<float>> slots;  // optimizer state, each values.size() floats
  // The shard's embedding tables (docs/sparse.md), each as EmbeddingTable::save writes it (its own
  // checksum inside); a file with any is written in format 2. A checkpoint loaded for --resume
  // holds every saved shard's tables here: each new shard takes the rows it holds.
  std::vector<std::string> tables;
  // The same read from a file (read_shard_checkpoint_file): where each table lies in it, read
  // there in pieces when it is checked or loaded, never held whole.
  std::vector<TableInFile> table_files;
};

// One embedding table of a shard file, written where it lies (the PS's arena) instead of from a
// copy: its size in bytes (the file records it before them), and what writes exactly that many.
struct TableSource {
  uint64_t bytes = 0;
  std::function<void(ByteSink*)> write;
};

// Writes a shard file to `out` as it is made, the CRC-32 computed as the bytes go: the header,
// c's values and slots, then (format 2) `tables` (c.tables is not read). The bytes are
// encode_shard_checkpoint's; a save to a FileWriter holds no second copy of the tables. Returns
// the CRC the manifest records (file_crc). Throws pstrain::Error from the sink (a failed write).
uint32_t write_shard_checkpoint(const ShardCheckpoint& c, const std::vector<TableSource>& tables,
                                ByteSink* out);
// The bytes that writes, without writing them.
uint64_t shard_checkpoint_size(const ShardCheckpoint& c, const std::vector<TableSource>& tables);
// The whole file in memory, c.tables as its tables (tests, the fuzzer, small files).
std::string encode_shard_checkpoint(const ShardCheckpoint& c);
// Validates magic, format, sizes and the CRC-32 of the whole file; on failure returns false and
// sets *error to what is wrong (e.g. "truncated: 1200 bytes, the header promises 4800").
bool decode_shard_checkpoint(const std::string& bytes, ShardCheckpoint* out, std::string* error);
// The shard file at `path`, of `bytes` bytes whose file_crc is `crc` (file_crc_of's), with the
// same checks and errors, read in pieces (--resume, pstrain-export: a file of gigabytes is not
// held): the header, values and slots into *out, its tables located in out->table_files (not read:
// read_saved_table checks each where it lies). A failed open or read says so with the errno text.
bool read_shard_checkpoint_file(const std::string& path, uint64_t bytes, uint32_t crc, ShardCheckpoint* out,
                                std::string* error);

// The chief's record that version `version` is complete: every shard file with its size and
// CRC-32, and the model's layout (a line per variable: name, offset, shape).
struct CheckpointManifest {
  uint64_t version = 0;
  uint64_t total = 0;
  uint64_t total_steps = 0;
  struct File {
    std::string name;
    uint64_t bytes = 0;
    uint32_t crc = 0;
  };
  std::vector<File> shards;  // in shard order
  std::string layout;        // "name offset dim0xdim1\n" per variable
  // The job's fingerprint (shared/checkpoint/job_fingerprint.h): key, value; empty in manifests written
  // before it was recorded. Values are one line each.
  std::vector<std::pair<std::string, std::string>> job;
};

std::string encode_manifest(const CheckpointManifest& m);
bool decode_manifest(const std::string& text, CheckpointManifest* out, std::string* error);

uint32_t crc32_of(const std::string& bytes);
// The CRC-32 the manifest records for a shard file: of everything but the file's own trailing
// CRC (a CRC over data and its own CRC is the same constant for every file).
uint32_t file_crc(const std::string& shard_file_bytes);
// The same of the file at `path`, read in pieces of 1 MiB (a shard file may be gigabytes), and
// its size. False, with *error ("cannot open: No such file or directory"), otherwise.
bool file_crc_of(const std::string& path, uint64_t* bytes, uint32_t* crc, std::string* error);

// Names inside a checkpoint directory: DIR/v<version, 10 digits>/shard<s>of<S>.ckpt, MANIFEST.
std::string checkpoint_version_dir(const std::string& dir, uint64_t version);
std::string shard_file_name(uint32_t shard, uint32_t num_shards);
// Versions that have a directory in `dir`, newest first (empty if dir does not exist).
std::vector<uint64_t> checkpoint_versions(const std::string& dir);

// The chief's clean-up after a complete checkpoint: keeps the newest `keep` complete versions
// (removing the temporaries a write cut short left in them) and any incomplete one newer than
// the newest complete (a write may be under way); removes every other version directory: older
// complete ones, and incomplete ones (no MANIFEST: a checkpoint cut short). Only the files
// pstrain writes there are removed (shard files, MANIFEST, model.json, batch norm's .npy, and
// their .tmp); a directory holding anything else is left with it. "" or what could not be
// removed, naming each path and the errno text.
std::string prune_checkpoints(const std::string& dir, int keep);

}  // namespace pstrain
