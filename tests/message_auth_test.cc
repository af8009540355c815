// Sealed cluster messages (proto/message_auth.h): what verifies, what does not, and key files
// that authenticate nobody.
#include "proto/message_auth.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "evaluation.pb.h"
#include "tests/temp_dir.h"

namespace placer::proto {
namespace {

using ::testing::HasSubstr;

const std::vector<uint8_t> kPayload = {'v', 'e', 'r', 'd', 'i', 'c', 't', 0, 1, 2};

TEST(MessageAuthTest, ASealedMessageOpensForItsChannelWithItsSenderAndPayload) {
  const ClusterKey key = ClusterKey::Generate();
  const MessageSealer sealer(key, "session-a");
  const Opened opened = MessageSealer(key, "session-a")
                            .Open("placer/results", sealer.Seal("placer/results", 2, kPayload));
  ASSERT_TRUE(opened.ok()) << ToString(opened.rejection);
  EXPECT_EQ(opened.sender, 2);
  EXPECT_EQ(opened.payload, kPayload);
}

// The MAC is the standard HMAC-SHA256 over what message_auth.h says it covers, each field after
// its length as 8 little-endian bytes: the expected value is Python's
//   hmac.new(bytes(range(32)), b"".join(struct.pack("<Q", len(f)) + f for f in
//            [b"placer-cluster-v1", b"session-a", b"placer/results", b"2", payload]),
//            hashlib.sha256).hexdigest()
TEST(MessageAuthTest, TheMacIsHmacSha256OverTheLengthPrefixedFields) {
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += fmt::format("{:02x}", i);
  const MessageSealer sealer(ClusterKey::FromHex(hex, "test"), "session-a");
  wire::Sealed sealed;
  const std::vector<uint8_t> bytes = sealer.Seal("placer/results", 2, kPayload);
  ASSERT_TRUE(sealed.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  std::string mac;
  for (unsigned char c : sealed.mac()) mac += fmt::format("{:02x}", c);
  EXPECT_EQ(mac, "6621d37cf72c39a3a80c2450f7c42b469de1d7275a9a12e0569aeb9919893693");
  EXPECT_EQ(sealed.sender(), 2);
  EXPECT_EQ(std::vector<uint8_t>(sealed.payload().begin(), sealed.payload().end()), kPayload);
}

TEST(MessageAuthTest, AnotherKeySessionOrChannelOrAnAlteredByteDoesNotVerify) {
  const ClusterKey key = ClusterKey::Generate();
  const MessageSealer sealer(key, "session-a");
  const std::vector<uint8_t> sealed = sealer.Seal("placer/inbox/1", 0, kPayload);
  EXPECT_EQ(
      MessageSealer(ClusterKey::Generate(), "session-a").Open("placer/inbox/1", sealed).rejection,
      Rejection::kBadMac);
  // A message recorded in another run, or moved to another worker's inbox.
  EXPECT_EQ(MessageSealer(key, "session-b").Open("placer/inbox/1", sealed).rejection,
            Rejection::kBadMac);
  EXPECT_EQ(sealer.Open("placer/inbox/2", sealed).rejection, Rejection::kBadMac);
  // Every single byte flipped: the envelope no longer parses, or its MAC no longer verifies.
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::vector<uint8_t> altered = sealed;
    altered[i] ^= 0x01;
    const Opened opened = sealer.Open("placer/inbox/1", altered);
    EXPECT_FALSE(opened.ok()) << "byte " << i;
    EXPECT_TRUE(opened.payload.empty());
  }
  // (The flips above include the sender's byte: who sealed it is covered too.) What a message
  // claims can be read unverified, to name a refused peer.
  const std::optional<Opened> claimed = Unverified(sealer.Seal("placer/results", 1, kPayload));
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->sender, 1);
  EXPECT_EQ(claimed->payload, kPayload);
}

TEST(MessageAuthTest, GarbageAndEmptyMessagesAreGarbage) {
  const MessageSealer sealer(ClusterKey::Generate(), "s");
  EXPECT_EQ(sealer.Open("c", {}).rejection, Rejection::kGarbage);
  EXPECT_EQ(sealer.Open("c", {0xff, 0xff, 0xff}).rejection, Rejection::kGarbage);
  // Parses as an envelope (field 1, a payload) but carries no MAC.
  EXPECT_EQ(sealer.Open("c", {0x0a, 0x01, 'x'}).rejection, Rejection::kBadMac);
}

TEST(MessageAuthTest, DroppedMessagesAreCountedByWhy) {
  DroppedMessages drops;
  EXPECT_EQ(drops.ToString(), "0");
  drops.Count(Rejection::kBadMac);
  drops.Count(Rejection::kBadMac);
  drops.Count(Rejection::kNotOutstanding);
  EXPECT_EQ(drops.total(), 3);
  EXPECT_EQ(drops.ToString(), "3 (2 bad MAC, 1 replayed or not outstanding)");
}

TEST(MessageAuthTest, AKeyFileIsTheOwnersOnlyAndReadsBackAsTheSameKey) {
  test_support::TempDir dir("placer_message_auth_test");
  const std::filesystem::path file = dir.path() / "cluster.key";
  const ClusterKey key = ClusterKey::Generate();
  key.WriteFile(file);
  struct stat status {};
  ASSERT_EQ(stat(file.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0600u);
  EXPECT_EQ(ClusterKey::ReadFile(file).bytes(), key.bytes());
  // Written over a file others could read: the mode is made 0600 again.
  chmod(file.c_str(), 0644);
  ClusterKey::Generate().WriteFile(file);
  ASSERT_EQ(stat(file.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0600u);
  EXPECT_NE(ClusterKey::ReadFile(file).bytes(), key.bytes());
}

TEST(MessageAuthTest, AKeyOthersMayReadOrThatIsNotHexIsRefusedNamingTheFile) {
  test_support::TempDir dir("placer_message_auth_test");
  const std::filesystem::path file = dir.path() / "cluster.key";
  ClusterKey::Generate().WriteFile(file);
  chmod(file.c_str(), 0640);
  try {
    ClusterKey::ReadFile(file);
    FAIL() << "a key readable by its group was taken";
  } catch (const KeyError& error) {
    EXPECT_THAT(error.what(), HasSubstr(file.string()));
    EXPECT_THAT(error.what(), HasSubstr("mode 0640"));
    EXPECT_THAT(error.what(), HasSubstr("chmod 600"));
  }
  EXPECT_THROW(ClusterKey::ReadFile(dir.path() / "missing.key"), KeyError);
  try {
    ClusterKey::FromHex("abc", "PLACER_CLUSTER_KEY");
    FAIL() << "three hex digits were taken for a key";
  } catch (const KeyError& error) {
    EXPECT_THAT(error.what(), HasSubstr("PLACER_CLUSTER_KEY: a cluster key is 64 hex digits"));
  }
  EXPECT_THROW(ClusterKey::FromHex(std::string(64, 'g'), "x"), KeyError);
  const std::string hex(64, 'a');
  EXPECT_EQ(ClusterKey::FromHex(" " + hex + "\n", "x").bytes()[0], 0xaa);
}

}  // namespace
}  // namespace placer::proto
