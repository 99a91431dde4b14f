#include "planner/simulate/strategy_registry.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/search/phased_planner.h"
#include "planner/strategies/best_static.h"
#include "planner/strategies/megatron_dev_dyncp.h"
#include "planner/strategies/megatron_dyncp.h"
#include "planner/strategies/videosys_dcp.h"

namespace dcp {
namespace {

constexpr char kBucket[] = "bucket";
constexpr char kPacked[] = "packed";
constexpr char kBestStatic[] = "best-static";
constexpr char kMegatronDynCp[] = "megatron-dyncp";
constexpr char kMegatronHcp[] = "megatron-hcp";
constexpr char kVideoSysDcp[] = "videosys-dcp";
constexpr char kDcp[] = "dcp";
constexpr char kDcpFixedAccum[] = "dcp-fixed-accum";
constexpr char kDcpUniformRecompute[] = "dcp-uniform-recompute";
constexpr char kDcpPhased[] = "dcp-phased";
constexpr char kDcpOneLayout[] = "dcp-one-layout";

// `base`, its workload maximum (where 0) the longest of `batches`.
StaticOptions WithWorkloadMax(StaticOptions base,
                              const std::vector<absl::Span<const int64_t>>& batches) {
  if (base.workload_max_length_tokens != 0) return base;
  for (absl::Span<const int64_t> batch : batches) {
    for (int64_t length : batch) {
      base.workload_max_length_tokens =
          std::max(base.workload_max_length_tokens, length);
    }
  }
  return base;
}

// What every strategy holds: its name, the cost model and the options.
class NamedStrategy : public Strategy {
 public:
  NamedStrategy(std::string name, const CostModel& cost_model,
                StrategyOptions options)
      : name_(std::move(name)),
        cost_model_(cost_model),
        options_(std::move(options)) {}
  const std::string& name() const override { return name_; }

 protected:
  StaticOptions StaticOptionsFor(
      absl::Span<const int64_t> lengths_tokens) const {
    return WithWorkloadMax(options_.static_options, {lengths_tokens});
  }
  // The plan named after the strategy and priced.
  absl::StatusOr<StrategyPlan> Priced(absl::StatusOr<Plan> plan,
                                      absl::Span<const int64_t> lengths) {
    if (!plan.ok()) return plan.status();
    plan->strategy = name_;
    PredictPlan(cost_model_, lengths, *plan);
    StrategyPlan result;
    result.plan = *std::move(plan);
    return result;
  }
  absl::StatusOr<StrategyPlan> Priced(absl::StatusOr<PhasedPlan> phased,
                                      absl::Span<const int64_t> lengths) {
    if (!phased.ok()) return phased.status();
    phased->strategy = name_;
    for (Plan& phase : phased->phases) phase.strategy = name_;
    PredictPhasedPlan(cost_model_, lengths, *phased);
    StrategyPlan result;
    result.phased = *std::move(phased);
    return result;
  }

  const std::string name_;
  const CostModel& cost_model_;
  const StrategyOptions options_;
};

// bucket or packed at the static SP size of the options.
class StaticStrategy : public NamedStrategy {
 public:
  using NamedStrategy::NamedStrategy;
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
      const std::vector<std::vector<int64_t>>&, const StrategyOptions&)>;
  using PlanFn = std::function<absl::StatusOr<PlanT>(
      const CostModel&, absl::Span<const int>, absl::Span<const int64_t>,
      const Setting&)>;
  TunedStrategy(std::string name, const CostModel& cost_model,
                StrategyOptions options, TuneFn tune, PlanFn plan)
      : NamedStrategy(std::move(name), cost_model, std::move(options)),
        tune_(std::move(tune)),
        plan_(std::move(plan)) {}
  bool phased() const override {
    return std::is_same<PlanT, PhasedPlan>::value;
  }
  bool tuned_over_run() const override { return true; }
  absl::Status Tune(const std::vector<std::vector<int64_t>>& batches) override {
    absl::StatusOr<Setting> setting = tune_(
        cost_model_, options_.planner_options.sp_sizes, batches, options_);
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
    return Priced(plan_(cost_model_, options_.planner_options.sp_sizes,
                        lengths, *setting_),
                  lengths);
  }

 private:
  const TuneFn tune_;
  const PlanFn plan_;
  std::optional<Setting> setting_;
};

// The best static setting over the run's batches (FindBestStaticSetting).
std::unique_ptr<Strategy> MakeBestStatic(const std::string& name,
                                         const CostModel& cost_model,
                                         const StrategyOptions& options) {
  return std::make_unique<TunedStrategy<StaticSetting, Plan>>(
      name, cost_model, options,
      [name](const CostModel& model, absl::Span<const int> sp_sizes,
             const std::vector<std::vector<int64_t>>& batches,
             const StrategyOptions& run) -> absl::StatusOr<StaticSetting> {
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
                                          const StrategyOptions& options) {
  return std::make_unique<TunedStrategy<MegatronDynCpSetting, PhasedPlan>>(
      name, cost_model, options,
      [](const CostModel& model, absl::Span<const int> sp_sizes,
         const std::vector<std::vector<int64_t>>& batches,
         const StrategyOptions& run) {
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
                                            const StrategyOptions& options) {
  return std::make_unique<TunedStrategy<MegatronDevDynCpSetting, PhasedPlan>>(
      name, cost_model, options,
      [](const CostModel& model, absl::Span<const int> sp_sizes,
         const std::vector<std::vector<int64_t>>& batches,
         const StrategyOptions&) {
        return TuneMegatronDevDynCp(model, sp_sizes, batches);
      },
      PlanMegatronDevDynCp);
}

// VideoSys's DCP: each batch's buckets profiled.
class VideoSysStrategy : public NamedStrategy {
 public:
  using NamedStrategy::NamedStrategy;
  bool phased() const override { return true; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    return Priced(PlanVideoSysDcp(cost_model_,
                                  options_.planner_options.sp_sizes, lengths),
                  lengths);
  }
};

// dcp's single-layout search (Planner), or one of its ablations.
class DcpOneLayoutStrategy : public NamedStrategy {
 public:
  using NamedStrategy::NamedStrategy;
  bool phased() const override { return false; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    PlannerOptions options = options_.planner_options;
    options.strategy_name = name_;
    // dcp weighs the same static configurations it is compared against.
    options.static_options = StaticOptionsFor(lengths);
    if (name_ == kDcpFixedAccum) options.variable_accumulation = false;
    if (name_ == kDcpUniformRecompute) options.pyramid_recompute = false;
    return Priced(Planner(cost_model_, std::move(options)).PlanBatch(lengths),
                  lengths);
  }
};

// dcp with re-grouping within a step (PlanPhasedBatch over dcp's planner):
// `dcp` as the planner service serves it (phases tried where the single
// layout's gap to the lower bound is at least 3%; a one-layout result is
// returned as a Plan), or `dcp-phased`, which searches phases for every
// batch and always returns a PhasedPlan.
class DcpStrategy : public NamedStrategy {
 public:
  using NamedStrategy::NamedStrategy;
  bool phased() const override { return true; }
  absl::StatusOr<StrategyPlan> PlanBatch(
      absl::Span<const int64_t> lengths) override {
    PhasedPlannerOptions phased_options;
    phased_options.planner_options = options_.planner_options;
    phased_options.planner_options.strategy_name = name_;
    phased_options.planner_options.static_options = StaticOptionsFor(lengths);
    if (name_ == kDcpPhased) phased_options.min_gap_to_try = 0;
    absl::StatusOr<PhasedPlan> planned =
        PlanPhasedBatch(cost_model_, lengths, phased_options);
    if (!planned.ok() || name_ == kDcpPhased || planned->phases.size() > 1) {
      return Priced(std::move(planned), lengths);
    }
    return Priced(std::move(planned->phases.front()), lengths);
  }
};

}  // namespace

std::vector<std::string> StrategyNames() {
  return {kBucket,        kPacked,        kBestStatic,
          kMegatronDynCp, kMegatronHcp,   kVideoSysDcp,
          kDcp,           kDcpOneLayout,  kDcpFixedAccum,
          kDcpUniformRecompute, kDcpPhased};
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    absl::string_view name, const CostModel& cost_model,
    const StrategyOptions& options) {
  const std::string n(name);
  if (n == kBucket || n == kPacked) {
    return std::make_unique<StaticStrategy>(n, cost_model, options);
  }
  if (n == kBestStatic) {
    return MakeBestStatic(n, cost_model, options);
  }
  if (n == kMegatronDynCp) {
    return MakeMegatronDynCp(n, cost_model, options);
  }
  if (n == kMegatronHcp) {
    return MakeMegatronHcp(n, cost_model, options);
  }
  if (n == kVideoSysDcp) {
    return std::make_unique<VideoSysStrategy>(n, cost_model, options);
  }
  if (n == kDcpOneLayout || n == kDcpFixedAccum ||
      n == kDcpUniformRecompute) {
    return std::make_unique<DcpOneLayoutStrategy>(n, cost_model, options);
  }
  if (n == kDcp || n == kDcpPhased) {
    return std::make_unique<DcpStrategy>(n, cost_model, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'; valid strategies: ",
                   absl::StrJoin(StrategyNames(), ", ")));
}

}  // namespace dcp
