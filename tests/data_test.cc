// Tests of the worker's data pipeline: IDX reading and its cache, sharded sampling, prefetching,
// and that a worker's memory does not grow with the dataset.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <tuple>

#include "shared/util/error.h"
#include "tests/test_util/errors.h"
#include "tests/test_util/idx_writer.h"
#include "tests/test_util/process.h"
#include "worker/data/dataset.h"
#include "worker/data/idx.h"
#include "worker/data/prefetch.h"
#include "worker/data/sampler.h"

namespace pstrain {
namespace {

using test::child_peak_rss_kib;

namespace fs = std::filesystem;

// Tiny 2x3 images whose first four pixels encode the record index (little-endian bytes); label
// r % 10. Lets a test recover which record a batch row came from.
constexpr uint32_t kRows = 2, kCols = 3, kDim = kRows * kCols;

uint8_t coded_pixel(uint32_t r, uint32_t p) {
  return p < 4 ? static_cast<uint8_t>(r >> (8 * p)) : static_cast<uint8_t>(p * 7);
}
uint8_t coded_label(uint32_t r) { return static_cast<uint8_t>(r % 10); }

uint32_t decode_record(const float* x) {
  uint32_t r = 0;
  for (uint32_t p = 0; p < 4; ++p) r |= static_cast<uint32_t>(std::lround(x[p] * 255.0f)) << (8 * p);
  return r;
}

struct CodedFiles {
  std::string images, labels;
};

CodedFiles write_coded(const std::string& dir, uint32_t n, bool gzip) {
  const std::string suffix = gzip ? ".gz" : "";
  CodedFiles f{dir + "/train-images-idx3-ubyte" + suffix, dir + "/train-labels-idx1-ubyte" + suffix};
  write_idx_images(f.images, n, kRows, kCols, coded_pixel, gzip);
  write_idx_labels(f.labels, n, coded_label, gzip);
  return f;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using test::error_of;

void expect_coded_records(const Dataset& data, const std::vector<size_t>& records) {
  std::vector<float> x(records.size() * kDim);
  std::vector<int32_t> y(records.size());
  data.read(records.data(), records.size(), x.data(), y.data());
  for (size_t i = 0; i < records.size(); ++i) {
    const uint32_t r = static_cast<uint32_t>(records[i]);
    for (uint32_t p = 0; p < kDim; ++p) {
      ASSERT_EQ(x[i * kDim + p], static_cast<float>(coded_pixel(r, p)) / 255.0f) << r << " " << p;
    }
    EXPECT_EQ(y[i], coded_label(r));
  }
}

// ---- IDX files and the Dataset ----

TEST(IdxDataset, ReadsPlainFiles) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 300, false);
  const auto data = Dataset::open_idx(f.images, f.labels, dir.path + "/cache");
  EXPECT_EQ(data->size(), 300u);
  EXPECT_EQ(data->feature_dim(), kDim);
  EXPECT_EQ(data->num_classes(), 10);
  expect_coded_records(*data, {299, 0, 257, 3, 3});
  EXPECT_FALSE(fs::exists(dir.path + "/cache"));  // plain files are used in place
}

// Consecutive records are read as runs, in 64 KiB reads whose ends fall inside records: every
// value lands where it belongs, runs and single records mixed, in and out of order.
TEST(IdxDataset, ReadsRunsOfConsecutiveRecords) {
  TempDir dir("data");
  const uint32_t n = 12000;  // 72,000 bytes of features: a run of all of them spans two reads
  const CodedFiles f = write_coded(dir.path, n, false);
  const auto data = Dataset::open_idx(f.images, f.labels, dir.path + "/cache");
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  expect_coded_records(*data, all);
  expect_coded_records(*data, {5, 6, 7, 100, 101, 3, 4, 11997, 11998, 11999, 0, 0, 1});
  std::vector<size_t> past_end = {11998, 11999, 12000};
  std::vector<float> x(past_end.size() * kDim);
  std::vector<int32_t> y(past_end.size());
  EXPECT_EQ(error_of([&] { data->read(past_end.data(), past_end.size(), x.data(), y.data()); }),
            f.images + ": record 12000 out of range (12000 records)");
}

TEST(IdxDataset, ReadsGzipFilesThroughTheCache) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 300, true);
  const auto data = Dataset::open_idx(f.images, f.labels, dir.path + "/cache/sub");
  EXPECT_EQ(data->size(), 300u);
  expect_coded_records(*data, {299, 0, 257, 3});
  const auto cached = list_dir(dir.path + "/cache/sub");
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0].rfind("train-images-idx3-ubyte.", 0), 0u) << cached[0];
  EXPECT_EQ(cached[1].rfind("train-labels-idx1-ubyte.", 0), 0u) << cached[1];
  EXPECT_EQ(fs::file_size(dir.path + "/cache/sub/" + cached[0]), 16 + 300 * kDim);
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(IdxDataset, CacheIsReusedAndRebuiltWhenTheSourceChanges) {
  TempDir dir("data");
  const std::string cache = dir.path + "/cache";
  const CodedFiles f = write_coded(dir.path, 40, true);
  Dataset::open_idx(f.images, f.labels, cache);
  const auto first = list_dir(cache);
  ASSERT_EQ(first.size(), 2u);
  const ino_t images_inode = inode_of(cache + "/" + first[0]);

  Dataset::open_idx(f.images, f.labels, cache);
  EXPECT_EQ(list_dir(cache), first);
  EXPECT_EQ(inode_of(cache + "/" + first[0]), images_inode);  // not rewritten

  write_coded(dir.path, 50, true);
  const struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};  // a distinct mtime
  ASSERT_EQ(::utimensat(AT_FDCWD, f.images.c_str(), later, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, f.labels.c_str(), later, 0), 0);
  const auto data = Dataset::open_idx(f.images, f.labels, cache);
  EXPECT_EQ(data->size(), 50u);
  expect_coded_records(*data, {49, 1});
  EXPECT_EQ(list_dir(cache).size(), 4u);  // new entries beside the stale ones
}

TEST(IdxDataset, ConcurrentOpenersRaceSafelyForOneCacheFile) {
  TempDir dir("data");
  const std::string cache = dir.path + "/cache";
  const CodedFiles f = write_coded(dir.path, 5000, true);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        const auto data = Dataset::open_idx(f.images, f.labels, cache);
        std::vector<float> x(kDim);
        int32_t y = 0;
        const size_t record = 4999;
        data->read(&record, 1, x.data(), &y);
        if (decode_record(x.data()) == 4999 && y == 9) ++ok;
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(list_dir(cache).size(), 2u);  // no temporary files left behind
}

TEST(IdxDataset, TruncatedImagesFileIsAnError) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 7, false);
  fs::resize_file(f.images, 16 + 7 * kDim - 1);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path); }),
            f.images + ": file is 57 bytes, but its header describes 7 records of 6 bytes after a "
                       "16-byte header");
  fs::resize_file(f.images, 10);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path); }),
            f.images + ": file is 10 bytes, too short for an IDX header");
}

TEST(IdxDataset, TruncatedGzipFileIsAnErrorAndLeavesNoCacheFile) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 3000, true);
  fs::resize_file(f.images, fs::file_size(f.images) / 2);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path + "/cache"); }),
            f.images + ": truncated gzip data");
  EXPECT_TRUE(list_dir(dir.path + "/cache").empty());
}

TEST(IdxDataset, BadMagicIsAnError) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 7, false);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.labels, f.labels, dir.path); }),
            f.labels + ": bad IDX magic 0x00000801 (expected 0x00000803: uint8 data with 3 "
                       "dimensions)");
  {
    std::fstream file(f.images, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put(0x0d);  // type byte: float instead of uint8
  }
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path); }),
            f.images + ": bad IDX magic 0x00000d03 (expected 0x00000803: uint8 data with 3 "
                       "dimensions)");
}

TEST(IdxDataset, ZeroImageDimensionIsAnError) {
  TempDir dir("data");
  const std::string images = dir.path + "/images";
  write_idx_images(images, 4, 0, 3, coded_pixel, false);
  write_idx_labels(dir.path + "/labels", 4, coded_label, false);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(images, dir.path + "/labels", dir.path); }),
            images + ": dimension 1 is 0");
}

TEST(IdxDataset, LabelOutOfRangeIsAnError) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 7, false);
  write_idx_labels(f.labels, 7, [](uint32_t r) { return static_cast<uint8_t>(r == 4 ? 10 : 1); },
                   false);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path); }),
            f.labels + ": label 10 of record 4 is not < num_classes 10");
  EXPECT_EQ(Dataset::open_idx(f.images, f.labels, dir.path, 11)->num_classes(), 11);
  EXPECT_EQ(error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path, 0); }),
            f.labels + ": num_classes must be in [1, 256] for uint8 labels, got 0");
}

TEST(IdxDataset, LabelCountMismatchIsAnError) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 7, true);
  write_idx_labels(f.labels, 6, coded_label, true);
  const std::string message = error_of([&] { Dataset::open_idx(f.images, f.labels, dir.path); });
  EXPECT_EQ(message.rfind(f.labels + " (decompressed " + dir.path + "/train-labels-idx1-ubyte.", 0),
            0u)
      << message;
  EXPECT_NE(message.find("): has 6 labels but " + f.images + " (decompressed "), std::string::npos)
      << message;
  EXPECT_NE(message.find(") has 7 images"), std::string::npos) << message;
}

TEST(IdxDataset, MissingFileIsAnError) {
  TempDir dir("data");
  EXPECT_EQ(error_of([&] { Dataset::open_idx(dir.path + "/nope", dir.path + "/nope2", dir.path); }),
            dir.path + "/nope: cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { Dataset::open_mnist_dir(dir.path, "train", dir.path); }),
            "data directory " + dir.path +
                ": missing train-images-idx3-ubyte (or train-images-idx3-ubyte.gz)");
  write_coded(dir.path, 7, true);
  fs::remove(dir.path + "/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(error_of([&] { Dataset::open_mnist_dir(dir.path, "train", dir.path); }),
            "data directory " + dir.path +
                ": missing train-labels-idx1-ubyte (or train-labels-idx1-ubyte.gz)");
  EXPECT_EQ(error_of([&] { Dataset::open_mnist_dir(dir.path, "test", dir.path); }),
            "data directory " + dir.path + ": unknown split 'test' (train or t10k)");
}

TEST(IdxDataset, MnistDirPrefersPlainFiles) {
  TempDir dir("data");
  write_coded(dir.path, 30, true);
  write_coded(dir.path, 20, false);
  const auto data = Dataset::open_mnist_dir(dir.path, "train", dir.path + "/cache");
  EXPECT_EQ(data->size(), 20u);
  EXPECT_FALSE(fs::exists(dir.path + "/cache"));
}

TEST(IdxDataset, ReadRejectsRecordOutOfRange) {
  TempDir dir("data");
  const CodedFiles f = write_coded(dir.path, 7, false);
  const auto data = Dataset::open_idx(f.images, f.labels, dir.path);
  const size_t record = 7;
  float x[kDim];
  int32_t y;
  EXPECT_EQ(error_of([&] { data->read(&record, 1, x, &y); }),
            f.images + ": record 7 out of range (7 records)");
}

TEST(IdxDataset, SyntheticMnistIsLearnable) {
  TempDir dir("data");
  write_synthetic_mnist(dir.path, "train", 1200, 8, 8, 3, false);
  const auto data = Dataset::open_mnist_dir(dir.path, "train", dir.path);
  const size_t dim = data->feature_dim();
  std::vector<float> x(dim);
  std::vector<double> centroid(10 * dim, 0.0);
  std::vector<int> count(10, 0);
  auto read = [&](size_t r) {
    int32_t y = 0;
    data->read(&r, 1, x.data(), &y);
    return y;
  };
  for (size_t r = 0; r < 1000; ++r) {
    const int32_t y = read(r);
    EXPECT_EQ(y, synthetic_label(3, static_cast<uint32_t>(r)));
    ++count[y];
    for (size_t p = 0; p < dim; ++p) centroid[y * dim + p] += x[p];
  }
  int correct = 0;
  for (size_t r = 1000; r < 1200; ++r) {
    const int32_t y = read(r);
    int best = 0;
    double best_dist = 1e300;
    for (int c = 0; c < 10; ++c) {
      double d = 0;
      for (size_t p = 0; p < dim; ++p) d += std::pow(x[p] - centroid[c * dim + p] / count[c], 2);
      if (d < best_dist) {
        best_dist = d;
        best = c;
      }
    }
    correct += best == y;
  }
  EXPECT_GE(correct, 190);  // nearest centroid separates the classes
}

TEST(IdxDataset, ReadsFashionMnistWhenInstalled) {
  const std::string dir = default_data_dir();
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz") &&
      !fs::exists(dir + "/t10k-images-idx3-ubyte")) {
    GTEST_SKIP() << "no Fashion-MNIST in " << dir;
  }
  TempDir cache("cache");
  const auto data = Dataset::open_mnist_dir(dir, "t10k", cache.path);
  EXPECT_EQ(data->size(), 10000u);
  EXPECT_EQ(data->feature_dim(), 784u);
  std::vector<float> x(784);
  int32_t y = -1;
  const size_t record = 0;
  data->read(&record, 1, x.data(), &y);
  EXPECT_EQ(y, 9);  // the first test image is an ankle boot
}

TEST(DataDirs, DefaultsFollowTheEnvironment) {
  const auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string("\x01") : std::string(v);
  };
  const std::string fm = saved("FASHION_MNIST_DIR"), xdg = saved("XDG_CACHE_HOME"),
                    home = saved("HOME");
  ::unsetenv("FASHION_MNIST_DIR");
  EXPECT_EQ(default_data_dir(), "/usr/share/datasets/fashion-mnist");
  ::setenv("FASHION_MNIST_DIR", "/data/fm", 1);
  EXPECT_EQ(default_data_dir(), "/data/fm");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_cache_dir(), "/xdg/pstrain");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/home/u/.cache/pstrain");
  ::unsetenv("HOME");
  EXPECT_EQ(default_cache_dir(), "/tmp/pstrain-cache");
  const auto restore = [](const char* name, const std::string& v) {
    if (v == "\x01") {
      ::unsetenv(name);
    } else {
      ::setenv(name, v.c_str(), 1);
    }
  };
  restore("FASHION_MNIST_DIR", fm);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

// ---- Sampling ----

TEST(Permutation, IsABijectionForManySizes) {
  for (const uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 64, 100, 255, 256, 1000, 4096, 4097, 65537}) {
    for (const bool shuffle : {true, false}) {
      const Permutation perm(n, 42, 3, shuffle);
      std::vector<char> seen(n, 0);
      for (uint64_t p = 0; p < n; ++p) {
        const uint64_t r = perm(p);
        ASSERT_LT(r, n) << "n=" << n;
        ASSERT_FALSE(seen[r]) << "n=" << n << " record " << r << " twice";
        seen[r] = 1;
      }
    }
  }
}

std::vector<uint64_t> table(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
  const Permutation perm(n, seed, epoch, shuffle);
  std::vector<uint64_t> t(n);
  for (uint64_t p = 0; p < n; ++p) t[p] = perm(p);
  return t;
}

TEST(Permutation, DependsOnSeedAndEpochOnly) {
  const auto base = table(1000, 1, 0, true);
  EXPECT_EQ(table(1000, 1, 0, true), base);
  for (const auto& other : {table(1000, 1, 1, true), table(1000, 2, 0, true)}) {
    int same = 0;
    for (size_t p = 0; p < base.size(); ++p) same += base[p] == other[p];
    EXPECT_LT(same, 20);  // about 1 expected for independent permutations
  }
  int fixed = 0;
  for (size_t p = 0; p < base.size(); ++p) fixed += base[p] == p;
  EXPECT_LT(fixed, 20);
}

TEST(Permutation, IsTheIdentityWithoutShuffle) {
  const auto t = table(777, 9, 5, false);
  for (uint64_t p = 0; p < t.size(); ++p) ASSERT_EQ(t[p], p);
}

std::vector<size_t> batch_of(const ShardSampler& s, uint64_t epoch, uint64_t step) {
  std::vector<size_t> out(static_cast<size_t>(s.share()));
  s.batch_records(epoch, step, out.data());
  return out;
}

TEST(ShardSampler, ShardsAreDisjointAndCoverThePermutationPrefix) {
  const uint64_t n = 103;
  for (int world = 1; world <= 4; ++world) {
    for (const int batch : {1, 3, 8}) {
      const Permutation perm(n, 11, 2, true);
      const uint64_t steps = n / (world * batch);
      std::vector<size_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        const ShardSampler s(n, rank, world, batch, 11, true);
        ASSERT_EQ(s.steps_per_epoch(), steps);
        ASSERT_EQ(s.shard_size(), steps * batch);
        for (uint64_t k = 0; k < steps; ++k) {
          const auto b = batch_of(s, 2, k);
          seen.insert(seen.end(), b.begin(), b.end());
        }
      }
      std::vector<size_t> prefix;
      for (uint64_t p = 0; p < steps * world * batch; ++p) prefix.push_back(perm(p));
      std::sort(seen.begin(), seen.end());
      std::sort(prefix.begin(), prefix.end());
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "overlapping shards";
      EXPECT_EQ(seen, prefix) << "world=" << world << " batch=" << batch;
    }
  }
}

TEST(ShardSampler, WorkersTogetherSeeOneBigWorkersBatches) {
  const uint64_t n = 1000;
  const int batch = 5;
  for (int world = 1; world <= 4; ++world) {
    const ShardSampler big(n, 0, 1, world * batch, 77, true);
    for (uint64_t k = 0; k < big.steps_per_epoch(); ++k) {
      const auto global = batch_of(big, 4, k);
      for (int rank = 0; rank < world; ++rank) {
        const ShardSampler s(n, rank, world, batch, 77, true);
        ASSERT_EQ(s.steps_per_epoch(), big.steps_per_epoch());
        const auto local = batch_of(s, 4, k);
        for (int j = 0; j < batch; ++j) ASSERT_EQ(local[j], global[rank * batch + j]);
      }
    }
  }
}

// Per-worker batch sizes: workers with shares {10, 20, 30} together take, step by step, exactly
// the records of one worker with 60, each its contiguous run, whatever their micro-batches.
TEST(ShardSampler, UnequalSharesTogetherSeeOneBigWorkersBatches) {
  const uint64_t n = 1000;
  const std::vector<int> shares = {10, 20, 30};
  const ShardSampler big(n, 0, 1, 60, 77, true);
  for (const int micro : {1, 7, 10, 64}) {
    std::vector<ShardSampler> workers;
    for (int rank = 0; rank < 3; ++rank) workers.emplace_back(n, rank, shares, micro, 77, true);
    ASSERT_EQ(workers[2].steps_per_epoch(), 16u);  // 1000 / 60
    ASSERT_EQ(workers[2].global_batch(), 60u);
    for (uint64_t k = 0; k < big.steps_per_epoch(); ++k) {
      std::vector<size_t> joined;
      for (const ShardSampler& w : workers) {
        ASSERT_EQ(w.steps_per_epoch(), big.steps_per_epoch());
        int samples = 0;
        for (int j = 0; j < w.micro_batches(); ++j) {
          std::vector<size_t> part(static_cast<size_t>(w.micro_size(j)));
          w.micro_records(3, k, j, part.data());
          joined.insert(joined.end(), part.begin(), part.end());
          samples += w.micro_size(j);
          ASSERT_LE(w.micro_size(j), micro);
        }
        ASSERT_EQ(samples, w.share());
        ASSERT_EQ(w.micro_batches(), (w.share() + std::min(micro, w.share()) - 1) / std::min(micro, w.share()));
      }
      ASSERT_EQ(joined, batch_of(big, 3, k)) << "micro " << micro << " step " << k;
    }
  }
  EXPECT_EQ(error_of([] { ShardSampler(59, 0, std::vector<int>{10, 20, 30}, 5, 1, true); }),
            "data sampler: empty shard: 59 records < a global batch of 60");
  EXPECT_EQ(error_of([] { ShardSampler(100, 0, std::vector<int>{10, 0}, 5, 1, true); }),
            "data sampler: batch size must be >= 1, got 0");
  EXPECT_EQ(error_of([] { ShardSampler(100, 0, std::vector<int>{10, 20}, 0, 1, true); }),
            "data sampler: micro-batch size must be >= 1, got 0");
  const ShardSampler s(100, 1, std::vector<int>{10, 20}, 8, 1, true);
  size_t out[8];
  EXPECT_EQ(error_of([&] { s.micro_records(0, 0, 3, out); }), "data sampler: micro-batch 3 out of range (3 per step)");
}

TEST(ShardSampler, RejectsEmptyShardsAndBadArguments) {
  EXPECT_EQ(error_of([] { ShardSampler(11, 0, 3, 4, 1, true); }),
            "data sampler: empty shard: 11 records < 3 workers x batch 4");
  EXPECT_EQ(error_of([] { ShardSampler(100, 3, 3, 4, 1, true); }),
            "data sampler: rank 3 out of range for 3 workers");
  EXPECT_EQ(error_of([] { ShardSampler(100, 0, 0, 4, 1, true); }),
            "data sampler: world size must be >= 1, got 0");
  EXPECT_EQ(error_of([] { ShardSampler(100, 0, 1, 0, 1, true); }),
            "data sampler: batch size must be >= 1, got 0");
  const ShardSampler s(12, 2, 3, 4, 1, true);
  EXPECT_EQ(s.steps_per_epoch(), 1u);
  size_t out[4];
  EXPECT_EQ(error_of([&] { s.batch_records(0, 1, out); }),
            "data sampler: step 1 out of range (1 steps per epoch)");
}

// ---- Prefetching ----

struct CodedSet {
  TempDir dir{"prefetch"};
  std::unique_ptr<Dataset> data;
  explicit CodedSet(uint32_t n) {
    const CodedFiles f = write_coded(dir.path, n, false);
    data = Dataset::open_idx(f.images, f.labels, dir.path);
  }
};

TEST(Prefetcher, YieldsEveryBatchInOrderWithTheRightContents) {
  CodedSet set(50);
  const ShardSampler sampler(50, 1, 2, 4, 5, true);  // 6 steps per epoch
  Prefetcher prefetcher(*set.data, sampler, 5, 3, 0, 2);
  Batch b;
  for (uint64_t epoch = 5; epoch < 8; ++epoch) {
    for (uint64_t step = 0; step < 6; ++step) {
      ASSERT_TRUE(prefetcher.next(b));
      ASSERT_EQ(b.epoch, epoch);
      ASSERT_EQ(b.step, step);
      ASSERT_EQ(b.size, 4);
      ASSERT_EQ(b.x.size(), 4 * kDim);
      const auto expected = batch_of(sampler, epoch, step);
      for (int j = 0; j < 4; ++j) {
        EXPECT_EQ(decode_record(&b.x[j * kDim]), expected[j]);
        EXPECT_EQ(b.y[j], coded_label(static_cast<uint32_t>(expected[j])));
      }
    }
  }
  EXPECT_FALSE(prefetcher.next(b));
  EXPECT_FALSE(prefetcher.next(b));
}

// Every micro-batch of epochs 0 and 1 of `sampler` (3 steps of 4 + 4 + 2 records) from `get`, in
// order and with its records, then the end; `after_step` runs after each step's micro-batches.
void expect_micro_batches_of_two_epochs(const ShardSampler& sampler, const std::function<bool(Batch&)>& get,
                                        const std::function<void()>& after_step) {
  Batch b;
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    for (uint64_t step = 0; step < 3; ++step) {
      for (int j = 0; j < 3; ++j) {
        ASSERT_TRUE(get(b));
        ASSERT_EQ(std::make_tuple(b.epoch, b.step, b.micro, b.micro_batches), std::make_tuple(epoch, step, j, 3));
        ASSERT_EQ(b.size, j < 2 ? 4 : 2);
        std::vector<size_t> expected(static_cast<size_t>(b.size));
        sampler.micro_records(epoch, step, j, expected.data());
        for (int i = 0; i < b.size; ++i) EXPECT_EQ(decode_record(&b.x[i * kDim]), expected[i]);
      }
      after_step();
    }
  }
  EXPECT_FALSE(get(b));
}

// take() leaves the reader asleep until wake_reader() (the trainer's idle moment), except when
// the queue has run empty: a consumer that never wakes it, or takes more batches between wakes
// than the queue holds (micro-batches), still gets every batch, in order.
TEST(Prefetcher, TakeGetsEveryBatchWithOrWithoutWakingTheReader) {
  CodedSet set(50);
  const ShardSampler sampler(50, 1, std::vector<int>{4, 10}, 4, 5, true);  // 3 steps; 4 + 4 + 2
  for (const bool wake : {false, true}) {
    for (const int depth : {1, 2, 8}) {
      SCOPED_TRACE("wake " + std::to_string(wake) + " depth " + std::to_string(depth));
      Prefetcher prefetcher(*set.data, sampler, 0, 2, 0, depth);
      expect_micro_batches_of_two_epochs(
          sampler, [&](Batch& b) { return prefetcher.take(b); },
          [&] {
            if (wake) prefetcher.wake_reader();
          });
    }
  }
}

// With accumulation every step yields its micro-batches in order, each with its records.
TEST(Prefetcher, YieldsTheMicroBatchesOfEachStep) {
  CodedSet set(50);
  const ShardSampler sampler(50, 1, std::vector<int>{4, 10}, 4, 5, true);  // 3 steps; 4 + 4 + 2
  Prefetcher prefetcher(*set.data, sampler, 0, 2, 0, 2);
  expect_micro_batches_of_two_epochs(sampler, [&](Batch& b) { return prefetcher.next(b); }, [] {});
}

TEST(Prefetcher, StopsAfterMaxBatches) {
  CodedSet set(12);
  const ShardSampler sampler(12, 0, 1, 4, 5, false);  // 3 steps per epoch
  Prefetcher prefetcher(*set.data, sampler, 0, 10, 5, 3);
  Batch b;
  std::vector<std::pair<uint64_t, uint64_t>> got;
  while (prefetcher.next(b)) got.emplace_back(b.epoch, b.step);
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}};
  EXPECT_EQ(got, want);
}

// A replaced worker (or a resumed job) starts mid-epoch: the batches from there on are exactly
// those of a prefetcher that started at the beginning.
TEST(Prefetcher, StartingMidEpochYieldsTheUninterruptedRunsBatches) {
  CodedSet set(50);
  const ShardSampler sampler(50, 1, 2, 4, 5, true);  // 6 steps per epoch
  Prefetcher full(*set.data, sampler, 0, 3, 0, 2);
  Prefetcher resumed(*set.data, sampler, 1, 2, 0, 2, 4);  // global step 10 = (epoch 1, step 4)
  Batch a, b;
  for (int skipped = 0; skipped < 10; ++skipped) ASSERT_TRUE(full.next(a));
  int compared = 0;
  while (full.next(a)) {
    ASSERT_TRUE(resumed.next(b));
    ASSERT_EQ(std::make_pair(b.epoch, b.step), std::make_pair(a.epoch, a.step));
    ASSERT_EQ(b.x, a.x);
    ASSERT_EQ(b.y, a.y);
    ++compared;
  }
  EXPECT_EQ(compared, 8);  // steps 10..17
  EXPECT_FALSE(resumed.next(b));
}

TEST(Prefetcher, DestructsPromptlyWhenTheConsumerStopsEarly) {
  CodedSet set(100);
  const ShardSampler sampler(100, 0, 1, 10, 5, true);
  {
    Prefetcher untouched(*set.data, sampler, 0, 1000000, 0, 4);
  }
  Prefetcher prefetcher(*set.data, sampler, 0, 1000000, 0, 4);
  Batch b;
  ASSERT_TRUE(prefetcher.next(b));
  ASSERT_TRUE(prefetcher.next(b));
  // The destructor must wake the reader blocked on a full queue and join it.
}

TEST(Prefetcher, RecyclesBatchBuffers) {
  CodedSet set(400);
  const ShardSampler sampler(400, 0, 1, 4, 5, true);
  const int depth = 3;
  Prefetcher prefetcher(*set.data, sampler, 0, 1, 0, depth);
  Batch b;
  std::set<const float*> buffers;
  int batches = 0;
  while (prefetcher.next(b)) {
    if (++batches > 2 * depth) buffers.insert(b.x.data());
  }
  EXPECT_EQ(batches, 100);
  EXPECT_LE(buffers.size(), static_cast<size_t>(depth + 2));
}

// Fills features with the record index and fails on the third read.
class FailingDataset : public Dataset {
 public:
  size_t size() const override { return 100; }
  size_t feature_dim() const override { return 1; }
  int num_classes() const override { return 10; }
  void read(const size_t* records, size_t count, float* x, int32_t* y) const override {
    if (++reads_ == 3) throw std::runtime_error("disk on fire");
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(records[i]), y[i] = 0;
  }

 private:
  mutable std::atomic<int> reads_{0};
};

TEST(Prefetcher, ReaderErrorSurfacesFromNextAfterEarlierBatches) {
  FailingDataset data;
  const ShardSampler sampler(100, 0, 1, 10, 5, false);
  Prefetcher prefetcher(data, sampler, 0, 1, 0, 4);
  Batch b;
  ASSERT_TRUE(prefetcher.next(b));
  EXPECT_EQ(b.x[0], 0.0f);
  ASSERT_TRUE(prefetcher.next(b));
  EXPECT_EQ(b.x[0], 10.0f);
  EXPECT_EQ(error_of([&] { prefetcher.next(b); }), "data reader thread: disk on fire");
  EXPECT_EQ(error_of([&] { prefetcher.next(b); }), "data reader thread: disk on fire");
}

TEST(Prefetcher, FileTruncatedAfterOpenSurfacesFromNext) {
  TempDir dir("prefetch");
  const CodedFiles f = write_coded(dir.path, 100, false);
  const auto data = Dataset::open_idx(f.images, f.labels, dir.path);
  fs::resize_file(f.images, 16 + 10 * kDim);
  const ShardSampler sampler(100, 0, 1, 10, 5, false);
  Prefetcher prefetcher(*data, sampler, 0, 1, 0, 1);
  Batch b;
  ASSERT_TRUE(prefetcher.next(b));
  // Unshuffled, the second batch's 10 records are one run: one read of 10 records, past the end.
  EXPECT_EQ(error_of([&] { prefetcher.next(b); }),
            f.images + ": short read of 60 bytes at offset 76 (file truncated after it was "
                       "opened?)");
}

TEST(Prefetcher, RejectsZeroDepth) {
  FailingDataset data;
  const ShardSampler sampler(100, 0, 1, 10, 5, false);
  EXPECT_EQ(error_of([&] { Prefetcher(data, sampler, 0, 1, 0, 0); }),
            "prefetcher: depth must be >= 1, got 0");
}

// ---- Memory ----

constexpr long kRssSlackKib = 2048;
constexpr size_t kControlBytes = 8 << 20;  // what a control child holds: 4x the slack

// Touches kControlBytes and keeps them while `body` runs: a stand-in for state that grows.
std::function<void()> holding_control_bytes(const std::function<void()>& body) {
  return [body] {
    std::vector<char> held(kControlBytes, 1);
    body();
    volatile char sink = held[held.size() / 2];
    (void)sink;
  };
}

// Compares children's peaks: small-input run, 10x-input run, and the small run plus control
// bytes, which proves the measurement can see growth of that size at all.
void expect_flat_peak(const std::function<void()>& small, const std::function<void()>& large,
                      const std::function<void()>& small_again, const char* what) {
  const long base = child_peak_rss_kib(small);
  const long grown = child_peak_rss_kib(large);
  const long control = child_peak_rss_kib(holding_control_bytes(small_again));
  std::printf("%s peak RSS: 1x %ld KiB, 10x %ld KiB, 1x + %zu KiB held %ld KiB\n", what, base,
              grown, kControlBytes >> 10, control);
  if (control <= base + kRssSlackKib) {
    GTEST_SKIP() << "peak RSS here does not resolve " << (kControlBytes >> 10) << " KiB";
  }
  EXPECT_LE(grown, base + kRssSlackKib) << what << ": memory grows with the input size";
}

// Opens DIR's gzip "train" split (decompressing it into `cache`) and reads one shuffled epoch.
void read_one_epoch(const std::string& dir, const std::string& cache) {
  const auto data = Dataset::open_mnist_dir(dir, "train", cache);
  const ShardSampler sampler(data->size(), 0, 1, 50, 7, true);
  Prefetcher prefetcher(*data, sampler, 0, 1, 0, 4);
  Batch b;
  uint64_t batches = 0;
  while (prefetcher.next(b)) ++batches;
  if (batches != sampler.steps_per_epoch()) throw std::runtime_error("epoch cut short");
}

TEST(DataMemory, PeakRssDoesNotGrowWithDatasetSize) {
  // Fails if the data (47 MB at 60k records) or its decompression were held in memory.
  TempDir small("rss-small"), large("rss-large");
  write_synthetic_mnist(small.path, "train", 6000, 28, 28, 1, true);
  write_synthetic_mnist(large.path, "train", 60000, 28, 28, 1, true);
  expect_flat_peak([&] { read_one_epoch(small.path, small.path + "/cache1"); },
                   [&] { read_one_epoch(large.path, large.path + "/cache"); },
                   [&] { read_one_epoch(small.path, small.path + "/cache2"); }, "dataset");
}

void sample_one_epoch(uint64_t n) {
  const ShardSampler sampler(n, 0, 1, 1000, 7, true);
  std::vector<size_t> records(1000);
  size_t sum = 0;
  for (uint64_t k = 0; k < sampler.steps_per_epoch(); ++k) {
    sampler.batch_records(3, k, records.data());
    sum += records[0];
  }
  volatile size_t sink = sum;
  (void)sink;
}

TEST(DataMemory, PeakRssDoesNotGrowWithRecordCountWhenSampling) {
  // Fails if the permutation were materialised (32 MB of indices at 4M records).
  expect_flat_peak([] { sample_one_epoch(400000); }, [] { sample_one_epoch(4000000); },
                   [] { sample_one_epoch(400000); }, "sampler");
}

}  // namespace
}  // namespace pstrain
