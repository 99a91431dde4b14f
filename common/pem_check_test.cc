#include "common/pem_check.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(ReadPemFileTest, ReadsTheFileOrNamesIt) {
  const std::string path = TestTempPath("cert.pem");
  std::ofstream(path) << "-----BEGIN CERTIFICATE-----\n";
  EXPECT_EQ(ReadPemFile("planner CA", path).value(),
            "-----BEGIN CERTIFICATE-----\n");
  std::ofstream(path, std::ios::trunc).flush();
  EXPECT_THAT(ReadPemFile("planner CA", path).status().message(),
              HasSubstr("the planner CA PEM file '" + path + "' is empty"));
  EXPECT_THAT(
      ReadPemFile("client key", path + ".missing").status().message(),
      HasSubstr("cannot read the client key PEM file '" + path + ".missing'"));
}

/// Two self-signed EC certificates and their keys, made by the openssl
/// command line in the test's temporary directory.
class PemCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "no openssl command line to make test certificates";
    }
    dir_ = EmptyTestDirectory("pem_check");
    const std::string script = absl::StrCat(
        "set -e; cd '", dir_, "'; for n in a b; do ",
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 ",
        "-nodes -keyout $n.key -out $n.pem -days 1 -subj /CN=$n; done ",
        "> openssl.log 2>&1");
    ASSERT_EQ(std::system(script.c_str()), 0) << "see " << dir_;
  }

  std::string Read(const std::string& name) const {
    return ReadTestFile(dir_ + "/" + name);
  }

  std::string dir_;
};

TEST_F(PemCheckTest, AMatchingPairPasses) {
  EXPECT_TRUE(CheckPemCertificates("CA", "a.pem", Read("a.pem")).ok());
  EXPECT_TRUE(
      CheckPemCertificates("CA", "ab.pem", Read("a.pem") + Read("b.pem"))
          .ok());
  EXPECT_TRUE(
      CheckPemKeyPair("a.pem", Read("a.pem"), "a.key", Read("a.key")).ok());
}

TEST_F(PemCheckTest, GarbageIsNamedNotPassedOn) {
  const absl::Status garbage =
      CheckPemCertificates("server certificate", "tls.crt", "not a cert\n");
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.message(),
              HasSubstr("the server certificate 'tls.crt' holds no PEM "
                        "certificate that OpenSSL can read"));
  // A certificate followed by a broken block.
  const absl::Status broken = CheckPemCertificates(
      "CA", "ca.crt",
      Read("a.pem") + "-----BEGIN CERTIFICATE-----\nAAAA\n"
                      "-----END CERTIFICATE-----\n");
  EXPECT_THAT(broken.message(),
              HasSubstr("has 2 PEM blocks of which only 1 read as "
                        "certificates"));
  // A key where the certificate should be.
  EXPECT_FALSE(CheckPemCertificates("CA", "a.key", Read("a.key")).ok());
  const absl::Status key =
      CheckPemKeyPair("a.pem", Read("a.pem"), "a.key", "garbage");
  EXPECT_THAT(key.message(),
              HasSubstr("the key 'a.key' holds no unencrypted PEM private key"));
}

TEST_F(PemCheckTest, AnotherCertificatesKeyIsRefused) {
  const absl::Status status =
      CheckPemKeyPair("a.pem", Read("a.pem"), "b.key", Read("b.key"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("the key 'b.key' does not belong to the certificate "
                        "'a.pem'"));
}

TEST_F(PemCheckTest, ReadsAndChecksFiles) {
  const std::string a_pem = dir_ + "/a.pem";
  const std::string a_key = dir_ + "/a.key";
  const std::string b_key = dir_ + "/b.key";
  absl::StatusOr<std::string> ca = ReadPemCertificates("client CA", a_pem);
  ASSERT_TRUE(ca.ok()) << ca.status();
  EXPECT_EQ(*ca, Read("a.pem"));
  absl::StatusOr<PemKeyPair> pair =
      ReadPemKeyPair("server certificate", a_pem, "server key", a_key);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->cert_chain, Read("a.pem"));
  EXPECT_EQ(pair->private_key, Read("a.key"));

  // A key file where the certificates should be, another certificate's
  // key, and a missing file: each refused by name.
  EXPECT_THAT(ReadPemCertificates("client CA", a_key).status().message(),
              HasSubstr("the client CA '" + a_key + "'"));
  EXPECT_THAT(
      ReadPemKeyPair("server certificate", a_key, "server key", a_key)
          .status()
          .message(),
      HasSubstr("the server certificate '" + a_key + "'"));
  EXPECT_THAT(
      ReadPemKeyPair("server certificate", a_pem, "server key", b_key)
          .status()
          .message(),
      HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(ReadPemKeyPair("client certificate", a_pem, "client key",
                             a_key + ".missing")
                  .status()
                  .message(),
              HasSubstr("cannot read the client key PEM file"));
}

}  // namespace
}  // namespace dcp
