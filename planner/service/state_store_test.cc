#include "planner/service/state_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory under TEST_TMPDIR for each test.
std::string TestDirectory() { return FreshTestDirectory("state_store_"); }

TEST(StateStoreTest, WritesReadsAndReplaces) {
  auto store = StateStore::Open(TestDirectory() + "/nested/dir");
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::optional<std::string>> missing = (*store)->Read("a.json");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  ASSERT_TRUE((*store)->Write("a.json", "first").ok());
  EXPECT_EQ((*store)->Read("a.json")->value(), "first");
  ASSERT_TRUE((*store)->Write("a.json", std::string("x\0y", 3)).ok());
  EXPECT_EQ((*store)->Read("a.json")->value(), std::string("x\0y", 3));
  ASSERT_TRUE((*store)->Write("empty", "").ok());
  EXPECT_EQ((*store)->Read("empty")->value(), "");
}

TEST(StateStoreTest, ListsByPrefixSorted) {
  auto store = StateStore::Open(TestDirectory());
  ASSERT_TRUE(store.ok());
  for (const char* name :
       {"step_0003", "step_0001", "params_v1", "step_0002"}) {
    ASSERT_TRUE((*store)->Write(name, name).ok());
  }
  EXPECT_THAT((*store)->List("step_").value(),
              ElementsAre("step_0001", "step_0002", "step_0003"));
  EXPECT_THAT((*store)->List("").value(),
              ElementsAre("params_v1", "step_0001", "step_0002", "step_0003"));
  EXPECT_THAT((*store)->List("nothing").value(), IsEmpty());
  ASSERT_TRUE((*store)->Delete("step_0002").ok());
  ASSERT_TRUE((*store)->Delete("step_0002").ok());  // idempotent
  EXPECT_THAT((*store)->List("step_").value(),
              ElementsAre("step_0001", "step_0003"));
}

TEST(StateStoreTest, SurvivesReopen) {
  const std::string directory = TestDirectory();
  {
    auto store = StateStore::Open(directory);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Write("workers.json", "{}").ok());
  }
  auto store = StateStore::Open(directory);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Read("workers.json")->value(), "{}");
}

// A crash between writing the temporary file and renaming it leaves the
// temporary file behind: readers see the old value (or none) and never the
// temporary file, and reopening removes it.
TEST(StateStoreTest, LeftoverTemporaryFileIsIgnored) {
  const std::string directory = TestDirectory();
  auto store = StateStore::Open(directory);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Write("params_v1", "old").ok());
  WriteTestFile(directory + "/params_v1~tmp.123.0", "new but not committed");
  WriteTestFile(directory + "/params_v2~tmp.123.1", "never committed");

  EXPECT_EQ((*store)->Read("params_v1")->value(), "old");
  EXPECT_FALSE((*store)->Read("params_v2")->has_value());
  EXPECT_THAT((*store)->List("params").value(), ElementsAre("params_v1"));
  EXPECT_THAT((*store)->List("").value(), ElementsAre("params_v1"));

  store->reset();  // the crashed process
  auto reopened = StateStore::Open(directory);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(std::filesystem::exists(directory + "/params_v1~tmp.123.0"));
  EXPECT_FALSE(std::filesystem::exists(directory + "/params_v2~tmp.123.1"));
  EXPECT_EQ((*reopened)->Read("params_v1")->value(), "old");
  // Writes leave no temporary files behind.
  ASSERT_TRUE((*reopened)->Write("params_v2", "committed").ok());
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_THAT(files, ElementsAre("params_v1", "params_v2", "~lock"));
}

TEST(StateStoreTest, OneLiveStorePerDirectory) {
  const std::string directory = TestDirectory();
  auto first = StateStore::Open(directory);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Write("job.json", "{}").ok());
  // The temporary file of a write in flight must survive a second Open.
  WriteTestFile(directory + "/job.json~tmp.7.0", "in flight");

  auto second = StateStore::Open(directory);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("state directory '", directory,
                                     "' is in use by another planner "
                                     "(process ",
                                     ::getpid(), ")")));
  EXPECT_TRUE(std::filesystem::exists(directory + "/job.json~tmp.7.0"));

  first->reset();  // releases the lock
  auto third = StateStore::Open(directory);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->Read("job.json")->value(), "{}");
  EXPECT_FALSE(std::filesystem::exists(directory + "/job.json~tmp.7.0"));
}

TEST(StateStoreTest, RenameMovesAValue) {
  auto store = StateStore::Open(TestDirectory());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Write("step_1.pb", "garbled").ok());
  ASSERT_TRUE((*store)->Rename("step_1.pb", "step_1.pb.corrupt").ok());
  EXPECT_FALSE((*store)->Read("step_1.pb")->has_value());
  EXPECT_EQ((*store)->Read("step_1.pb.corrupt")->value(), "garbled");
  const absl::Status missing = (*store)->Rename("step_2.pb", "x");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("step_2.pb"));
  EXPECT_EQ((*store)->Rename("step_1.pb.corrupt", "../out").code(),
            absl::StatusCode::kInvalidArgument);
}

// Waits recorded instead of slept, and, at chosen waits, a fix of the
// cause (the disk freed) run while waiting.
struct RecordedSleeps {
  std::vector<absl::Duration> waits;
  std::function<void(int)> on_wait;
  std::function<void(absl::Duration)> Sleep() {
    return [this](absl::Duration wait) {
      waits.push_back(wait);
      if (on_wait) on_wait(static_cast<int>(waits.size()));
    };
  }
};

// A store in a fresh directory whose waits between write attempts are
// recorded in `sleeps`.
class StateStoreRetryTest : public ::testing::Test {
 protected:
  StateStoreRetryTest() { options.sleep = sleeps.Sleep(); }

  const std::string directory = TestDirectory();
  RecordedSleeps sleeps;
  StateStore::Options options;
};

// A full state directory failed the write (and the worker's call, and the
// job) at once: now it is retried with bounded backoff, then reported with
// the directory, the errno text and what to do.
TEST_F(StateStoreRetryTest, FailedWriteIsRetriedThenSaysWhatToDo) {
  int writes = 0;
  options.write_file = [&writes](const std::string& path, absl::string_view) {
    ++writes;
    return FileSystemError("writing", path, ENOSPC);
  };
  auto store = StateStore::Open(directory, options);
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::Status full = (*store)->Write("step_1.pb", "bytes");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()),
              AllOf(HasSubstr(directory + "/step_1.pb"),
                    HasSubstr("No space left on device"),
                    HasSubstr("5 attempts over 3.75s"),
                    HasSubstr(absl::StrCat("free space in '", directory,
                                           "' or point --state-dir "
                                           "elsewhere"))));
  EXPECT_EQ(writes, StateStore::kWriteAttempts);
  EXPECT_THAT(sleeps.waits,
              ElementsAre(absl::Milliseconds(250), absl::Milliseconds(500),
                          absl::Seconds(1), absl::Seconds(2)));
}

TEST_F(StateStoreRetryTest, WriteThatSucceedsOnARetryIsOk) {
  int writes = 0;
  options.write_file = [&writes](const std::string& path,
                                 absl::string_view bytes) {
    if (++writes <= 2) return FileSystemError("writing", path, ENOSPC);
    return WriteFileAtomically(path, bytes);
  };
  auto store = StateStore::Open(directory, options);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Write("step_1.pb", "bytes").ok());
  EXPECT_EQ((*store)->Read("step_1.pb")->value(), "bytes");
  EXPECT_EQ(sleeps.waits.size(), 2u);
}

// The real file system: a directory where the key's file belongs cannot be
// replaced by a file (EISDIR), neither written nor removed.
TEST_F(StateStoreRetryTest, UnwritablePathIsRetriedThenNamed) {
  auto store = StateStore::Open(directory, options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::filesystem::create_directories(directory + "/job.pb/inside");
  const absl::Status write = (*store)->Write("job.pb", "bytes");
  EXPECT_FALSE(write.ok());
  EXPECT_THAT(
      std::string(write.message()),
      AllOf(HasSubstr(directory + "/job.pb"), HasSubstr("Is a directory"),
            HasSubstr("point --state-dir elsewhere")));
  EXPECT_EQ(sleeps.waits.size(), StateStore::kWriteAttempts - 1u);
  const absl::Status removal = (*store)->Delete("job.pb");
  EXPECT_FALSE(removal.ok());
  EXPECT_THAT(std::string(removal.message()),
              HasSubstr("point --state-dir elsewhere"));
  EXPECT_EQ(sleeps.waits.size(), 2 * (StateStore::kWriteAttempts - 1u));

  // The cause removed during the waits (space freed): the write gets through.
  sleeps.waits.clear();
  sleeps.on_wait = [this](int wait) {
    if (wait == 2) std::filesystem::remove_all(directory + "/job.pb");
  };
  ASSERT_TRUE((*store)->Write("job.pb", "bytes").ok());
  EXPECT_EQ((*store)->Read("job.pb")->value(), "bytes");
  EXPECT_EQ(sleeps.waits.size(), 2u);
}

TEST(StateStoreTest, RejectsBadNames) {
  auto store = StateStore::Open(TestDirectory());
  ASSERT_TRUE(store.ok());
  for (const std::string& name :
       {std::string(""), std::string("."), std::string(".."),
        std::string("a/b"), std::string("../escape"), std::string("a b"),
        std::string("x~tmp.1.2"), std::string("na\0me", 5),
        std::string(201, 'a')}) {
    const absl::Status write = (*store)->Write(name, "bytes");
    EXPECT_EQ(write.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(write.message()), HasSubstr("state key")) << name;
    EXPECT_EQ((*store)->Read(name).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ((*store)->Delete(name).code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(StateStore::ValidateName("step_000012.json").ok());
  EXPECT_TRUE(StateStore::ValidateName(std::string(200, 'a')).ok());
  EXPECT_THAT(StateStore::ValidateName("a:b").message(), HasSubstr("':'"));
}

TEST(StateStoreTest, OpenFailsOnAFile) {
  const std::string directory = TestDirectory();
  std::filesystem::create_directories(directory);
  WriteTestFile(directory + "/file", "x");
  EXPECT_EQ(StateStore::Open(directory + "/file").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StateStore::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateStoreTest, ConcurrentWritersLeaveOneWholeValue) {
  auto store = StateStore::Open(TestDirectory());
  ASSERT_TRUE(store.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::string value(1000, static_cast<char>('a' + t));
      for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE((*store)->Write("shared", value).ok());
        ASSERT_TRUE((*store)->Write(absl::StrCat("own_", t), value).ok());
        absl::StatusOr<std::optional<std::string>> read =
            (*store)->Read("shared");
        ASSERT_TRUE(read.ok() && read->has_value());
        ASSERT_EQ((*read)->size(), 1000u);
        ASSERT_EQ((*read)->find_first_not_of((**read)[0]), std::string::npos);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ((*store)->List("own_")->size(), 8u);
}

}  // namespace
}  // namespace dcp
