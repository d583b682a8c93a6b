#include "experiment/launcher.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::experiment {
namespace {

using Words = std::vector<std::string>;

Words Set(const Words& command, int n) {
  auto out = WithProcessCount(command, n);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : Words{};
}

std::string Refusal(const Words& command) {
  auto out = WithProcessCount(command, 2);
  EXPECT_FALSE(out.ok());
  return out.ok() ? "" : out.error().message;
}

TEST(ParseProcessCounts, TwoOrMoreDistinctCountsAscending) {
  auto c = ParseProcessCounts("8,1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<int>{1, 8}));
  EXPECT_EQ(*ParseProcessCounts("1,2,4"), (std::vector<int>{1, 2, 4}));
  for (const char* bad : {"", "1", "1,1", "0,2", "1,x", "1,,2", "1,2,", "-1,2", "1,5000"}) {
    auto r = ParseProcessCounts(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("--ranks"), std::string::npos);
    }
  }
}

TEST(WithProcessCount, TorchrunValueReplacedInEverySpelling) {
  EXPECT_EQ(Set({"torchrun", "--nproc_per_node", "8", "train.py", "--lr", "1"}, 1),
            (Words{"torchrun", "--nproc_per_node", "1", "train.py", "--lr", "1"}));
  EXPECT_EQ(Set({"/venv/bin/torchrun", "--standalone", "--nproc-per-node=gpu", "train.py"}, 4),
            (Words{"/venv/bin/torchrun", "--standalone", "--nproc-per-node=4", "train.py"}));
  // Not given: torchrun's default is 1 process; the option goes first.
  EXPECT_EQ(Set({"torchrun", "--standalone", "train.py"}, 2),
            (Words{"torchrun", "--nproc_per_node", "2", "--standalone", "train.py"}));
  // The script's own option of the same name is the script's.
  EXPECT_EQ(Set({"torchrun", "--nnodes", "1", "-m", "pkg.train", "--nproc_per_node", "7"}, 2),
            (Words{"torchrun", "--nproc_per_node", "2", "--nnodes", "1", "-m", "pkg.train",
                   "--nproc_per_node", "7"}));
}

TEST(WithProcessCount, PythonModuleLaunchers) {
  EXPECT_EQ(
      Set({"python3.12", "-u", "-m", "torch.distributed.run", "--nproc_per_node", "8", "train.py"},
          1),
      (Words{"python3.12", "-u", "-m", "torch.distributed.run", "--nproc_per_node", "1",
             "train.py"}));
  EXPECT_EQ(
      Set({"python", "-m", "torch.distributed.launch", "train.py"}, 2),
      (Words{"python", "-m", "torch.distributed.launch", "--nproc_per_node", "2", "train.py"}));
  auto l = RecogniseLauncher({"python", "-m", "torch.distributed.run", "t.py"});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->name, "python -m torch.distributed.run");
}

TEST(WithProcessCount, AccelerateLaunch) {
  EXPECT_EQ(Set({"accelerate", "launch", "--multi_gpu", "--num_processes", "8", "--mixed_precision",
                 "bf16", "train_oxford.py", "--batch_size", "128"},
                1),
            (Words{"accelerate", "launch", "--num_processes", "1", "--mixed_precision", "bf16",
                   "train_oxford.py", "--batch_size", "128"}));
  // --multi_gpu stays for more processes, and goes for one even when the count was not given.
  EXPECT_EQ(Set({"accelerate", "launch", "--multi_gpu", "--num_processes", "8", "t.py"}, 4),
            (Words{"accelerate", "launch", "--multi_gpu", "--num_processes", "4", "t.py"}));
  EXPECT_EQ(Set({"accelerate", "launch", "--multi-gpu", "t.py"}, 1),
            (Words{"accelerate", "launch", "--num_processes", "1", "t.py"}));
  EXPECT_EQ(Set({"accelerate", "launch", "--num-processes=8", "t.py"}, 2),
            (Words{"accelerate", "launch", "--num-processes=2", "t.py"}));
  EXPECT_EQ(Set({"accelerate", "launch", "t.py"}, 2),
            (Words{"accelerate", "launch", "--num_processes", "2", "t.py"}));
}

TEST(WithProcessCount, TheExamplesLauncherWhenItGivesTheCount) {
  EXPECT_EQ(Set({"/usr/bin/python3", "examples/launch.py", "--nproc-per-node", "2",
                 "examples/train.py", "--situation", "ddp"},
                1),
            (Words{"/usr/bin/python3", "examples/launch.py", "--nproc-per-node", "1",
                   "examples/train.py", "--situation", "ddp"}));
  EXPECT_NE(Refusal({"python3", "launch.py", "train.py"}).find("--nproc-per-node"),
            std::string::npos);
}

TEST(WithProcessCount, OtherCommandsAreRefusedNamingTheManualWay) {
  for (const Words& c :
       {Words{"python", "train.py"}, Words{"accelerate", "config"}, Words{"deepspeed", "train.py"},
        Words{"python", "-c", "print(1)"}, Words{}}) {
    const std::string why = Refusal(c);
    EXPECT_EQ(why.rfind("cannot change the process count of this command", 0), 0u) << why;
    EXPECT_NE(why.find("stallscope compare"), std::string::npos) << why;
  }
  const std::string multi = Refusal({"torchrun", "--nnodes=2", "--nproc_per_node", "8", "t.py"});
  EXPECT_NE(multi.find("multi-node"), std::string::npos) << multi;
  EXPECT_NE(Refusal({"accelerate", "launch", "--num_machines", "4", "t.py"}).find("multi-node"),
            std::string::npos);
}

}  // namespace
}  // namespace stallscope::experiment
