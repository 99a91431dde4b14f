// PlanSearch, the search of one batch: the layouts worth pricing
// (layout_ranking.h, over the batch priced once in batch_table.h), the
// greedy assignment to each, packing each group into micro-batches and
// pricing them, refinement of the best (refinement.h), group-size changes
// on small batches, and all-reduce hiding. Planner::PlanBatch at the end is
// the only public entry. Over 600 lines: these steps share PlanSearch's
// state (the batch table, the legal SP sizes, the ranked layouts and the
// options being tried), one class.

#include "planner/search/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <utility>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/strategies/baselines.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/layout.h"
#include "planner/search/assignment.h"
#include "planner/search/batch_table.h"
#include "planner/search/layout_ranking.h"
#include "planner/search/lower_bound.h"
#include "planner/search/packing.h"
#include "planner/search/refinement.h"

namespace dcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Small batches (Refinement::kThoroughSequences) refine this many of the
// best layouts.
constexpr size_t kThoroughRefineStarts = 4;
// Refined neighbours ChangeGroupSizes may try per search.
constexpr int kGroupSizeChanges = 32;

// The search for one batch. Not thread-safe; one per PlanBatch call.
class PlanSearch {
 public:
  PlanSearch(const CostModel& cost_model, const PlannerOptions& options,
             absl::Span<const int64_t> lengths_tokens, std::vector<int> sizes)
      : cost_model_(cost_model),
        options_(options),
        lengths_(lengths_tokens),
        sizes_(std::move(sizes)) {}

  absl::StatusOr<Plan> Run();

 private:
  // The whole search in the current mode (variable_accumulation_,
  // pyramid_recompute_).
  absl::StatusOr<Plan> Search();
  // Layouts worth pricing exactly, best estimate first (RankLayouts). The
  // estimates do not depend on the mode, so they are computed once per
  // batch.
  const std::vector<std::vector<int>>& RankedLayouts();
  std::vector<std::vector<int>> ranked_layouts_;
  // Micro-batches of one group in the current mode.
  // `capacity_tokens_per_rank` overrides how full a micro-batch may get
  // (0: as full as fits without recompute).
  std::vector<MicroBatchPlan> MicroBatches(
      const std::vector<int>& sequences, int sp_size,
      int64_t capacity_tokens_per_rank = 0) const;
  // The bins MicroBatches prices, each in packing order.
  std::vector<std::vector<int>> PackMicroBatches(
      const std::vector<int>& sequences, int sp_size,
      int64_t capacity_tokens_per_rank = 0) const;
  MicroBatchShape ShapeOfBin(const std::vector<int>& bin, int sp_size) const;
  // Recompute of a micro-batch in the current mode: what it needs, or the
  // uniform setting where that is more.
  int CheckpointedLayers(const MicroBatchShape& shape) const;
  GroupTime TimeGroup(const std::vector<int>& sequences, int sp_size) const;
  // Sets the mode-wide settings (fixed accumulation count, uniform
  // recompute) from an assignment.
  void SetModeSettings(const Assignment& assignment);
  // `group_order`, if given, receives the assignment's group index of each
  // plan group.
  absl::StatusOr<Plan> ToPlan(const Assignment& assignment,
                              std::vector<int>* group_order = nullptr);
  // ToPlan(assignment)->predicted_step_seconds, bit for bit, without making
  // the plan; nullopt where ToPlan fails. Sets the mode settings as ToPlan.
  std::optional<double> PredictedStepSeconds(const Assignment& assignment);
  Assignment Refine(Assignment assignment) const;
  // Small batches: changes one group's SP size (a group split into two of
  // half its size, or the slowest merged with another of its size into one
  // of twice it), each refined; keeps the best while it gains. Sets the mode
  // settings as PredictedStepSeconds.
  void ChangeGroupSizes(Assignment& assignment, double& seconds);
  bool ThoroughBudgetLeft() const {
    return thorough_sequences_timed_ < Refinement::kThoroughSequenceBudget;
  }
  // What the thorough refinement of a small batch has timed so far.
  mutable int64_t thorough_sequences_timed_ = 0;
  // Whether a static plan (PlanBucket, PlanPacked) might be predicted faster
  // than `seconds`. False when even the lower bound of plans that use only
  // the static SP size is not below it: the static plans then need not be
  // made (the bound costs a small part of making them).
  bool StaticPlanMayBeat(double seconds) const;
  // Lets the slowest groups run fewer, larger micro-batches (recomputing
  // more) when the longer last backward hides more of the gradient
  // all-reduce than the recompute costs.
  void HideAllReduce(Plan& plan, const Assignment& assignment,
                     const std::vector<int>& group_order) const;

  const CostModel& cost_model_;
  const PlannerOptions& options_;
  absl::Span<const int64_t> lengths_;
  std::vector<int> sizes_;
  // The batch priced once (set by Run).
  std::optional<BatchTable> table_;

  void ReportProgress(std::string message) const {
    if (options_.progress) options_.progress(PlanningProgress{std::move(message)});
  }

  // Mode settings: micro-batches per group when accumulation is fixed
  // (0 = variable), one recompute setting when pyramid is off (-1 = per
  // micro-batch).
  int fixed_micro_batches_ = 0;
  int uniform_checkpointed_layers_ = -1;
  // The mode being searched (the options', or a restriction of them).
  bool variable_accumulation_ = true;
  bool pyramid_recompute_ = true;
};


std::vector<MicroBatchPlan> PlanSearch::MicroBatches(
    const std::vector<int>& sequences, int sp_size,
    int64_t capacity_tokens_per_rank) const {
  std::vector<std::vector<int>> bins =
      PackMicroBatches(sequences, sp_size, capacity_tokens_per_rank);
  std::vector<MicroBatchPlan> micro_batches;
  micro_batches.reserve(bins.size());
  for (std::vector<int>& bin : bins) {
    MicroBatchPlan micro_batch;
    const MicroBatchShape shape = ShapeOfBin(bin, sp_size);
    micro_batch.checkpointed_layers = CheckpointedLayers(shape);
    const MicroBatchCost cost =
        cost_model_.MicroBatch(shape, micro_batch.checkpointed_layers);
    micro_batch.predicted_seconds = cost.total_seconds;
    micro_batch.predicted_peak_bytes = cost.peak_bytes;
    std::sort(bin.begin(), bin.end());
    micro_batch.sequence_indices = std::move(bin);
    micro_batches.push_back(std::move(micro_batch));
  }
  // Largest last: its backward hides the most of the gradient all-reduce.
  std::stable_sort(micro_batches.begin(), micro_batches.end(),
                   [](const MicroBatchPlan& a, const MicroBatchPlan& b) {
                     return a.predicted_seconds < b.predicted_seconds;
                   });
  return micro_batches;
}

MicroBatchShape PlanSearch::ShapeOfBin(const std::vector<int>& bin,
                                       int sp_size) const {
  return ShapeOfSequences(lengths_, bin, sp_size);
}

int PlanSearch::CheckpointedLayers(const MicroBatchShape& shape) const {
  const int needed = cost_model_.MinCheckpointedLayers(shape).value_or(
      cost_model_.model().num_layers);
  return std::max(needed, uniform_checkpointed_layers_);
}

std::vector<std::vector<int>> PlanSearch::PackMicroBatches(
    const std::vector<int>& sequences, int sp_size,
    int64_t capacity_tokens_per_rank) const {
  const int j = static_cast<int>(
      std::lower_bound(sizes_.begin(), sizes_.end(), sp_size) - sizes_.begin());
  std::vector<std::vector<int>> bins;
  if (fixed_micro_batches_ == 0) {
    // As many micro-batches as fit without recompute. `sequences` is in
    // packing order already (LongerFirst).
    std::vector<int64_t> lengths_in_order;
    lengths_in_order.reserve(sequences.size());
    for (int i : sequences) lengths_in_order.push_back(lengths_[i]);
    bins = PackFirstFitInOrder(lengths_in_order, sp_size,
                               capacity_tokens_per_rank > 0
                                   ? capacity_tokens_per_rank
                                   : table_->capacity_no_recompute(j));
    for (std::vector<int>& bin : bins) {
      for (int& position : bin) position = sequences[position];
    }
  } else {
    // Exactly the common count where the group has enough sequences: the
    // fewest that fit with full recompute, split until the count is reached.
    bins = PackFirstFitDecreasing(sequences, lengths_, sp_size,
                                  table_->capacity_full_recompute(j));
    const size_t wanted = std::min<size_t>(fixed_micro_batches_, sequences.size());
    while (bins.size() < wanted) {
      int split = -1;
      int64_t most = -1;
      for (int b = 0; b < static_cast<int>(bins.size()); ++b) {
        if (bins[b].size() < 2) continue;
        int64_t tokens = 0;
        for (int i : bins[b]) tokens += TokensPerRank(lengths_[i], sp_size);
        if (tokens > most) {
          most = tokens;
          split = b;
        }
      }
      if (split < 0) break;
      std::vector<std::vector<int>> halves =
          BalanceIntoBins(bins[split], lengths_, sp_size, 2);
      bins[split] = std::move(halves[0]);
      bins.push_back(std::move(halves[1]));
    }
  }
  return bins;
}

void PlanSearch::SetModeSettings(const Assignment& assignment) {
  fixed_micro_batches_ = 0;
  uniform_checkpointed_layers_ = -1;
  if (!variable_accumulation_) {
    int most = 1;
    for (size_t g = 0; g < assignment.group_sequences.size(); ++g) {
      const int j = assignment.group_size_index[g];
      most = std::max<int>(
          most, PackFirstFitDecreasing(assignment.group_sequences[g], lengths_,
                                       sizes_[j], table_->capacity_full_recompute(j))
                    .size());
    }
    fixed_micro_batches_ = most;
  }
  if (!pyramid_recompute_) {
    int most = 0;
    for (size_t g = 0; g < assignment.group_sequences.size(); ++g) {
      for (const MicroBatchPlan& micro_batch :
           MicroBatches(assignment.group_sequences[g],
                        sizes_[assignment.group_size_index[g]])) {
        most = std::max(most, micro_batch.checkpointed_layers);
      }
    }
    uniform_checkpointed_layers_ = most;
  }
}

absl::StatusOr<Plan> PlanSearch::ToPlan(const Assignment& assignment,
                                        std::vector<int>* group_order) {
  std::vector<int> group_sizes;
  for (int j : assignment.group_size_index) group_sizes.push_back(sizes_[j]);
  absl::StatusOr<std::vector<int>> first_ranks =
      PlaceGroups(group_sizes, cost_model_.cluster());
  if (!first_ranks.ok()) return first_ranks.status();
  SetModeSettings(assignment);
  Plan plan;
  plan.strategy = options_.strategy_name;
  std::vector<int> by_rank(group_sizes.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) {
    return (*first_ranks)[a] < (*first_ranks)[b];
  });
  if (group_order != nullptr) *group_order = by_rank;
  for (int g : by_rank) {
    GroupPlan group;
    for (int r = 0; r < group_sizes[g]; ++r) {
      group.ranks.push_back((*first_ranks)[g] + r);
    }
    group.micro_batches =
        MicroBatches(assignment.group_sequences[g], group_sizes[g]);
    plan.groups.push_back(std::move(group));
  }
  PredictPlan(cost_model_, lengths_, plan);
  plan.lower_bound_seconds = table_->lower_bound();
  return plan;
}

std::optional<double> PlanSearch::PredictedStepSeconds(
    const Assignment& assignment) {
  // With inexact sums a plan's costs (PredictPlan, from sequences in index
  // order) may differ in the last bit from TimeGroup's (packing order);
  // under ZeRO-3 the groups' micro-batches run in lockstep (LockstepSeconds),
  // which only the plan prices.
  if (!table_->squares_exact() || cost_model_.ShardsParameters()) {
    absl::StatusOr<Plan> plan = ToPlan(assignment);
    if (!plan.ok()) return std::nullopt;
    return plan->predicted_step_seconds;
  }
  std::vector<int> group_sizes;
  for (int j : assignment.group_size_index) group_sizes.push_back(sizes_[j]);
  absl::StatusOr<std::vector<int>> first_ranks =
      PlaceGroups(group_sizes, cost_model_.cluster());
  if (!first_ranks.ok()) return std::nullopt;
  SetModeSettings(assignment);
  std::vector<int> by_rank(group_sizes.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) {
    return (*first_ranks)[a] < (*first_ranks)[b];
  });
  // As PredictPlan: the slowest group in rank order (first on ties) and
  // what of the all-reduce its last backward leaves exposed.
  double slowest_seconds = 0;
  double last_backward_of_slowest = 0;
  for (int g : by_rank) {
    const GroupTime time =
        TimeGroup(assignment.group_sequences[g], group_sizes[g]);
    if (time.seconds > slowest_seconds) {
      slowest_seconds = time.seconds;
      last_backward_of_slowest = time.last_backward_seconds;
    }
  }
  return slowest_seconds +
         std::max(0.0, cost_model_.GradientAllReduceSeconds() -
                           last_backward_of_slowest) +
         cost_model_.OptimizerStepSeconds();
}

GroupTime PlanSearch::TimeGroup(const std::vector<int>& sequences,
                                            int sp_size) const {
  // What MicroBatches would plan, priced without building the plans:
  // summed in the same order (fastest first) and the last micro-batch's
  // backward priced from its sequences in index order, as a plan holds them.
  std::vector<std::vector<int>> bins = PackMicroBatches(sequences, sp_size);
  struct Priced {
    double seconds;
    int checkpointed_layers;
    size_t bin;
  };
  std::vector<Priced> priced;
  priced.reserve(bins.size());
  for (size_t b = 0; b < bins.size(); ++b) {
    const MicroBatchShape shape = ShapeOfBin(bins[b], sp_size);
    const int layers = CheckpointedLayers(shape);
    priced.push_back(
        {cost_model_.MicroBatch(shape, layers).total_seconds, layers, b});
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const Priced& a, const Priced& b) {
                     return a.seconds < b.seconds;
                   });
  GroupTime time;
  for (const Priced& micro_batch : priced) time.seconds += micro_batch.seconds;
  if (!priced.empty()) {
    std::vector<int>& last = bins[priced.back().bin];
    std::sort(last.begin(), last.end());
    time.last_backward_seconds =
        cost_model_
            .MicroBatch(ShapeOfBin(last, sp_size),
                        priced.back().checkpointed_layers)
            .backward_seconds;
  }
  return time;
}

Assignment PlanSearch::Refine(Assignment assignment) const {
  Refinement refinement(
      *table_, lengths_, sizes_, cost_model_.GradientAllReduceSeconds(),
      [this](const std::vector<int>& sequences, int sp_size) {
        return TimeGroup(sequences, sp_size);
      },
      thorough_sequences_timed_);
  return refinement.Run(std::move(assignment));
}

void PlanSearch::ChangeGroupSizes(Assignment& assignment, double& seconds) {
  int refinements = 0;
  bool improved = true;
  while (improved && refinements < kGroupSizeChanges && ThoroughBudgetLeft()) {
    improved = false;
    std::vector<Assignment> neighbours;
    const int num_groups = static_cast<int>(assignment.group_size_index.size());
    // Splits: the group's sequences all to the first half, refinement
    // spreads them.
    for (int g = 0; g < num_groups; ++g) {
      const int j = assignment.group_size_index[g];
      if (j == 0 || sizes_[j - 1] * 2 != sizes_[j]) continue;
      const std::vector<int>& sequences = assignment.group_sequences[g];
      if (std::any_of(sequences.begin(), sequences.end(),
                      [&](int i) { return table_->MinSizeIndex(i) > j - 1; })) {
        continue;
      }
      Assignment split = assignment;
      split.group_size_index[g] = j - 1;
      split.group_size_index.push_back(j - 1);
      split.group_sequences.emplace_back();
      neighbours.push_back(std::move(split));
    }
    // Merges of the slowest group with each other of its size.
    std::vector<GroupTime> times(num_groups);
    int slowest = 0;
    for (int g = 0; g < num_groups; ++g) {
      times[g] = TimeGroup(assignment.group_sequences[g],
                           sizes_[assignment.group_size_index[g]]);
      if (times[g].seconds > times[slowest].seconds) slowest = g;
    }
    const int j = assignment.group_size_index[slowest];
    if (j + 1 < static_cast<int>(sizes_.size()) &&
        sizes_[j + 1] == 2 * sizes_[j]) {
      for (int g = 0; g < num_groups; ++g) {
        if (g == slowest || assignment.group_size_index[g] != j) continue;
        Assignment merged = assignment;
        std::vector<int>& into = merged.group_sequences[slowest];
        for (int i : merged.group_sequences[g]) table_->InsertInOrder(into, i);
        merged.group_size_index[slowest] = j + 1;
        merged.group_size_index.erase(merged.group_size_index.begin() + g);
        merged.group_sequences.erase(merged.group_sequences.begin() + g);
        neighbours.push_back(std::move(merged));
      }
    }
    std::optional<Assignment> best;
    double best_seconds = seconds * (1 - 1e-9);
    for (Assignment& neighbour : neighbours) {
      if (refinements >= kGroupSizeChanges || !ThoroughBudgetLeft()) break;
      std::vector<int> group_sizes;
      for (int k : neighbour.group_size_index) group_sizes.push_back(sizes_[k]);
      if (!PlaceGroups(group_sizes, cost_model_.cluster()).ok()) continue;
      ++refinements;
      SetModeSettings(neighbour);
      Assignment refined = Refine(std::move(neighbour));
      const std::optional<double> refined_seconds =
          PredictedStepSeconds(refined);
      if (refined_seconds && *refined_seconds < best_seconds) {
        best_seconds = *refined_seconds;
        best = std::move(refined);
      }
    }
    if (best) {
      assignment = *std::move(best);
      seconds = best_seconds;
      improved = true;
    }
  }
  // Leaves the mode settings as for the kept assignment.
  SetModeSettings(assignment);
}

bool PlanSearch::StaticPlanMayBeat(double seconds) const {
  absl::StatusOr<StaticConfig> config =
      ChooseStaticConfig(cost_model_, options_.static_options, lengths_);
  // Without a static configuration both static plans fail too.
  if (!config.ok()) return false;
  const int static_sizes[] = {config->sp_size};
  absl::StatusOr<double> bound =
      StepTimeLowerBound(cost_model_, static_sizes, lengths_);
  if (!bound.ok()) return true;
  // The margin keeps rounding between the bound's and the plans' sums from
  // ever skipping a plan that would have won.
  return *bound * (1 - 1e-9) < seconds;
}

void PlanSearch::HideAllReduce(Plan& plan, const Assignment& assignment,
                               const std::vector<int>& group_order) const {
  if (fixed_micro_batches_ != 0 || uniform_checkpointed_layers_ >= 0) return;
  if (plan.exposed_allreduce_seconds <= 0) return;
  // ToPlan laid groups out by first rank; `group_order` maps them back.
  const std::vector<int>& group_of_plan = group_order;
  const int layers = cost_model_.model().num_layers;
  for (int round = 0; round < 4 && plan.exposed_allreduce_seconds > 0;
       ++round) {
    size_t slowest = 0;
    for (size_t p = 1; p < plan.groups.size(); ++p) {
      if (plan.groups[p].predicted_seconds >
          plan.groups[slowest].predicted_seconds) {
        slowest = p;
      }
    }
    if (group_of_plan[slowest] < 0) return;
    const std::vector<int>& sequences =
        assignment.group_sequences[group_of_plan[slowest]];
    Plan best = plan;
    for (int k : {layers / 4, layers / 2, (3 * layers) / 4, layers}) {
      Plan trial = plan;
      trial.groups[slowest].micro_batches =
          MicroBatches(sequences, plan.groups[slowest].sp_size(),
                       cost_model_.MaxTokensPerRank(
                           k, plan.groups[slowest].sp_size()));
      PredictPlan(cost_model_, lengths_, trial);
      if (trial.predicted_step_seconds < best.predicted_step_seconds) {
        best = std::move(trial);
      }
    }
    if (best.predicted_step_seconds >= plan.predicted_step_seconds) return;
    plan = std::move(best);
  }
}

absl::StatusOr<Plan> PlanSearch::Run() {
  absl::StatusOr<BatchTable> table =
      BatchTable::Build(cost_model_, lengths_, sizes_);
  if (!table.ok()) return table.status();
  table_.emplace(*std::move(table));
  ReportProgress(absl::StrCat("priced ", lengths_.size(), " sequences (",
                              table_->num_classes(), " distinct lengths) on ",
                              sizes_.size(), " SP sizes"));
  variable_accumulation_ = options_.variable_accumulation;
  pyramid_recompute_ = options_.pyramid_recompute;
  absl::StatusOr<Plan> best = Search();
  if (!best.ok()) return best;
  ReportProgress(absl::StrCat("searched: predicted step ",
                              best->predicted_step_seconds, " s"));
  // The static ways of training are legal plans too: never return worse.
  // (They keep one accumulation count only up to a remainder, so not when
  // accumulation must be fixed.)
  if (options_.variable_accumulation &&
      StaticPlanMayBeat(best->predicted_step_seconds)) {
    for (auto* plan_static : {&PlanBucket, &PlanPacked}) {
      absl::StatusOr<Plan> plan =
          (*plan_static)(cost_model_, lengths_, options_.static_options);
      if (plan.ok() &&
          plan->predicted_step_seconds < best->predicted_step_seconds) {
        plan->strategy = options_.strategy_name;
        plan->lower_bound_seconds = table_->lower_bound();
        best = *std::move(plan);
      }
    }
  }
  // Fewer and larger micro-batches (a common accumulation count, one
  // recompute setting) can win when they hide more of an exposed all-reduce
  // than they cost, or when every micro-batch pays parameter-sharding
  // collectives (ZeRO-3); those plans are legal here too, so search them as
  // well.
  const bool per_micro_batch_cost = cost_model_.ShardingMicroBatchSeconds() > 0;
  if (best->exposed_allreduce_seconds <= 0 && !per_micro_batch_cost) {
    return best;
  }
  for (const auto& [variable, pyramid] :
       {std::pair{false, true}, std::pair{true, false},
        std::pair{false, false}}) {
    // Only restrictions of what the options allow.
    if ((variable && !options_.variable_accumulation) ||
        (pyramid && !options_.pyramid_recompute) ||
        (variable == options_.variable_accumulation &&
         pyramid == options_.pyramid_recompute)) {
      continue;
    }
    variable_accumulation_ = variable;
    pyramid_recompute_ = pyramid;
    ReportProgress(absl::StrCat(
        "searching again with ",
        variable ? "variable" : "one common", " accumulation and ",
        pyramid ? "pyramid" : "uniform", " recompute, ",
        per_micro_batch_cost ? "to pay the sharding collectives fewer times"
                             : "to hide the all-reduce"));
    absl::StatusOr<Plan> plan = Search();
    if (plan.ok() &&
        plan->predicted_step_seconds < best->predicted_step_seconds) {
      best = std::move(plan);
    }
  }
  return best;
}

const std::vector<std::vector<int>>& PlanSearch::RankedLayouts() {
  if (ranked_layouts_.empty()) {
    ranked_layouts_ = RankLayouts(*table_, sizes_, cost_model_.cluster(),
                                  [this](std::string message) {
                                    ReportProgress(std::move(message));
                                  });
  }
  return ranked_layouts_;
}

absl::StatusOr<Plan> PlanSearch::Search() {
  // Candidates are priced without making their plans; only the winner's
  // plan is made, once.
  // (seconds, layout rank, assignment) of every layout that could be placed.
  struct Priced {
    double seconds;
    size_t rank;
    Assignment assignment;
  };
  std::vector<Priced> priced;
  const std::vector<std::vector<int>>& layouts = RankedLayouts();
  for (size_t rank = 0; rank < layouts.size(); ++rank) {
    std::optional<Assignment> assignment =
        AssignGreedily(*table_, sizes_, layouts[rank]);
    if (!assignment) continue;
    const std::optional<double> seconds = PredictedStepSeconds(*assignment);
    if (!seconds) continue;
    priced.push_back({*seconds, rank, *std::move(assignment)});
  }
  if (priced.empty()) {
    return absl::InternalError(
        "no candidate layout could be placed on the cluster");
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const Priced& a, const Priced& b) {
                     return a.seconds < b.seconds;
                   });
  ReportProgress(absl::StrCat("priced ", layouts.size(),
                              " layouts exactly; refining the best"));
  // Small batches refine the best few layouts (a worse start may refine to
  // a better plan); larger ones the best.
  const size_t starts =
      static_cast<int64_t>(lengths_.size()) <= Refinement::kThoroughSequences
          ? std::min(priced.size(), kThoroughRefineStarts)
          : 1;
  std::optional<Assignment> best_assignment = priced[0].assignment;
  double best_seconds = priced[0].seconds;
  for (size_t start = 0; start < starts; ++start) {
    if (start > 0 && !ThoroughBudgetLeft()) break;
    SetModeSettings(priced[start].assignment);
    Assignment refined = Refine(priced[start].assignment);
    const std::optional<double> refined_seconds =
        PredictedStepSeconds(refined);
    if (refined_seconds && *refined_seconds < best_seconds) {
      best_seconds = *refined_seconds;
      best_assignment = std::move(refined);
    }
  }
  if (static_cast<int64_t>(lengths_.size()) <= Refinement::kThoroughSequences) {
    ChangeGroupSizes(*best_assignment, best_seconds);
  }
  std::vector<int> group_order;
  absl::StatusOr<Plan> best_plan = ToPlan(*best_assignment, &group_order);
  if (!best_plan.ok()) return best_plan.status();
  // Fewer, larger micro-batches for the slowest groups only when there is
  // all-reduce to hide.
  if (best_plan->exposed_allreduce_seconds > 0) {
    Plan plan = *best_plan;
    HideAllReduce(plan, *best_assignment, group_order);
    if (plan.predicted_step_seconds < best_plan->predicted_step_seconds) {
      best_plan = std::move(plan);
    }
  }
  return best_plan;
}

}  // namespace

absl::StatusOr<Plan> Planner::PlanBatch(
    absl::Span<const int64_t> lengths_tokens) const {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  absl::StatusOr<std::vector<int>> sizes =
      LegalSpSizes(cost_model_, options_.sp_sizes);
  if (!sizes.ok()) return sizes.status();
  PlanSearch search(cost_model_, options_, lengths_tokens, *std::move(sizes));
  return search.Run();
}

}  // namespace dcp
