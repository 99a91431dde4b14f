#include "planner/strategies/peer_registry.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/strategies/best_static.h"
#include "planner/strategies/megatron_dev_dyncp.h"
#include "planner/strategies/megatron_dyncp.h"
#include "planner/strategies/named_strategy.h"
#include "planner/strategies/videosys_dcp.h"

namespace dcp {
namespace {

constexpr char kBucket[] = "bucket";
constexpr char kPacked[] = "packed";
constexpr char kBestStatic[] = "best-static";
constexpr char kMegatronDynCp[] = "megatron-dyncp";
constexpr char kMegatronHcp[] = "megatron-hcp";
constexpr char kVideoSysDcp[] = "videosys-dcp";

// bucket or packed at the static SP size of the options.
class StaticStrategy : public NamedStrategy {
 public:
  StaticStrategy(std::string name, const CostModel& cost_model,
                 const PeerOptions& options)
      : NamedStrategy(std::move(name), cost_model, options.static_options) {}
  bool phased() const override { return false; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    const StaticOptions static_options = StaticOptionsFor(lengths);
    return Priced(name_ == kBucket
                         ? PlanBucket(cost_model_, lengths, static_options)
                         : PlanPacked(cost_model_, lengths, static_options),
                     lengths);
  }
};

// A strategy with one setting for the run (best-static's SP size and kind,
// the Megatron schedulers' per-rank cap and recompute), tuned over the
// run's batches: `Setting` has Describe(); `tune` and `plan` are its tuner
// and planner; `PlanT` is Plan or PhasedPlan. Without Tune, PlanBatch tunes
// on the one batch.
template <typename Setting, typename PlanT>
class TunedStrategy : public NamedStrategy {
 public:
  using TuneFn = std::function<absl::StatusOr<Setting>(
      const CostModel&, absl::Span<const int>,
      const std::vector<std::vector<int64_t>>&, const PeerOptions&)>;
  using PlanFn = std::function<absl::StatusOr<PlanT>(
      const CostModel&, absl::Span<const int>, absl::Span<const int64_t>,
      const Setting&)>;
  TunedStrategy(std::string name, const CostModel& cost_model,
                PeerOptions options, TuneFn tune, PlanFn plan)
      : NamedStrategy(std::move(name), cost_model, options.static_options),
        options_(std::move(options)),
        tune_(std::move(tune)),
        plan_(std::move(plan)) {}
  bool phased() const override {
    return std::is_same<PlanT, PhasedPlan>::value;
  }
  bool tuned_over_run() const override { return true; }
  absl::Status Tune(const std::vector<std::vector<int64_t>>& batches) override {
    absl::StatusOr<Setting> setting = tune_(
        cost_model_, options_.sp_sizes, batches, options_);
    if (!setting.ok()) return setting.status();
    setting_ = *std::move(setting);
    return absl::OkStatus();
  }
  std::string setting() const override {
    return setting_ ? setting_->Describe() : "";
  }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    if (!setting_) {
      absl::Status tuned = Tune({{lengths.begin(), lengths.end()}});
      if (!tuned.ok()) return tuned;
    }
    return Priced(plan_(cost_model_, options_.sp_sizes,
                        lengths, *setting_),
                  lengths);
  }

 private:
  const PeerOptions options_;
  const TuneFn tune_;
  const PlanFn plan_;
  std::optional<Setting> setting_;
};

// The best static setting over the run's batches (FindBestStaticSetting).
std::unique_ptr<Strategy> MakeBestStatic(const std::string& name,
                                         const CostModel& cost_model,
                                         const PeerOptions& options) {
  return std::make_unique<TunedStrategy<StaticSetting, Plan>>(
      name, cost_model, options,
      [name](const CostModel& model, absl::Span<const int> sp_sizes,
             const std::vector<std::vector<int64_t>>& batches,
             const PeerOptions& run) -> absl::StatusOr<StaticSetting> {
        absl::StatusOr<StaticSetting> setting = FindBestStaticSetting(
            model, std::vector<int>(sp_sizes.begin(), sp_sizes.end()),
            batches,
            WithWorkloadMax(run.static_options,
                            {batches.begin(), batches.end()}));
        if (!setting.ok()) {
          return absl::Status(
              setting.status().code(),
              absl::StrCat(name, ": ", setting.status().message()));
        }
        return setting;
      },
      [](const CostModel& model, absl::Span<const int>,
         absl::Span<const int64_t> lengths, const StaticSetting& setting) {
        return PlanStaticSetting(model, setting, lengths);
      });
}

// Megatron-LM's main-branch hybrid CP: rounds at barriers.
std::unique_ptr<Strategy> MakeMegatronHcp(const std::string& name,
                                          const CostModel& cost_model,
                                          const PeerOptions& options) {
  return std::make_unique<TunedStrategy<MegatronDynCpSetting, PhasedPlan>>(
      name, cost_model, options,
      [](const CostModel& model, absl::Span<const int> sp_sizes,
         const std::vector<std::vector<int64_t>>& batches,
         const PeerOptions& run) {
        return TuneMegatronDynCp(model, sp_sizes, batches,
                                 run.megatron_least_recompute_per_micro_batch);
      },
      PlanMegatronDynCp);
}

// Megatron-LM's dev-branch dynamic CP (packing-aware): its rounds follow
// each other without barriers (PhasedPlan::barriers is false, which
// PredictPhasedPlan prices).
std::unique_ptr<Strategy> MakeMegatronDynCp(const std::string& name,
                                            const CostModel& cost_model,
                                            const PeerOptions& options) {
  return std::make_unique<TunedStrategy<MegatronDevDynCpSetting, PhasedPlan>>(
      name, cost_model, options,
      [](const CostModel& model, absl::Span<const int> sp_sizes,
         const std::vector<std::vector<int64_t>>& batches,
         const PeerOptions&) {
        return TuneMegatronDevDynCp(model, sp_sizes, batches);
      },
      PlanMegatronDevDynCp);
}

// VideoSys's DCP: each batch's buckets profiled.
class VideoSysStrategy : public NamedStrategy {
 public:
  VideoSysStrategy(std::string name, const CostModel& cost_model,
                   const PeerOptions& options)
      : NamedStrategy(std::move(name), cost_model, options.static_options),
        sp_sizes_(options.sp_sizes) {}
  bool phased() const override { return true; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    return Priced(PlanVideoSysDcp(cost_model_, sp_sizes_, lengths), lengths);
  }

 private:
  const std::vector<int> sp_sizes_;
};

}  // namespace

std::vector<std::string> PeerStrategyNames() {
  return {kBucket,        kPacked,      kBestStatic,
          kMegatronDynCp, kMegatronHcp, kVideoSysDcp};
}

bool IsPeerStrategy(absl::string_view name) {
  const std::vector<std::string> peers = PeerStrategyNames();
  return std::find(peers.begin(), peers.end(), name) != peers.end();
}

absl::StatusOr<std::unique_ptr<Strategy>> MakePeerStrategy(
    absl::string_view name, const CostModel& cost_model,
    const PeerOptions& options) {
  const std::string n(name);
  if (n == kBucket || n == kPacked) {
    return std::make_unique<StaticStrategy>(n, cost_model, options);
  }
  if (n == kBestStatic) return MakeBestStatic(n, cost_model, options);
  if (n == kMegatronDynCp) return MakeMegatronDynCp(n, cost_model, options);
  if (n == kMegatronHcp) return MakeMegatronHcp(n, cost_model, options);
  if (n == kVideoSysDcp) {
    return std::make_unique<VideoSysStrategy>(n, cost_model, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown peer strategy '", name, "'; the peers: ",
                   absl::StrJoin(PeerStrategyNames(), ", ")));
}

}  // namespace dcp
