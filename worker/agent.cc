// WorkerAgent::Run as AgentRun, one rank's run: register, join the world,
// profile, then per step fetch, execute and report, with checkpoints and
// stops at step boundaries. Over 600 lines: the phases are modules of their
// own (agent.h); what stays here is their sequencing over the run's shared
// state (placement, communicator, model, executor), one class.

#include "worker/agent.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host_port.h"
#include "common/incarnation.h"
#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "planner/strategies/baselines.h"
#include "planner/client/proto_convert.h"
#include "torch/torch.h"
#include "worker/checkpoint_coordinator.h"
#include "worker/communication/communicator.h"
#include "worker/execution/dataset.h"
#include "worker/execution/model.h"
#include "worker/execution/model_kind.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/trainable_model.h"
#include "worker/placement.h"
#include "worker/plan_source.h"
#include "worker/profile_phase.h"
#include "worker/rendezvous.h"
#include "worker/status_context.h"
#include "worker/step_timing_files.h"
#include "worker/world_consensus.h"

namespace dcp {
namespace {

/// What a step's micro-batches add up to on this rank.
StepMeasurement Measure(const StepResult& executed, double step_seconds,
                        int64_t peak_memory_bytes) {
  StepMeasurement measured;
  WorkerStepMetrics& totals = measured.totals;
  totals.step_seconds = step_seconds;
  totals.peak_memory_bytes = peak_memory_bytes;
  totals.loss = executed.global_loss;
  for (const MicroBatchResult& micro : executed.micro_batches) {
    totals.compute_seconds += micro.compute_seconds;
    totals.communication_seconds += micro.communication_seconds;
    totals.tokens += micro.real_tokens;
    measured.micro_batches.push_back(
        {micro.compute_seconds, micro.communication_seconds, micro.phase});
  }
  totals.idle_seconds = std::max(0.0, step_seconds - totals.compute_seconds -
                                          totals.communication_seconds);
  return measured;
}

/// One rank's run of the agent: the phases of WorkerAgent::Run in order,
/// each a module of its own (see agent.h). Not thread-safe.
class AgentRun {
 public:
  AgentRun(PlannerClient& planner, const WorkerAgentOptions& options,
           const Clock& clock, WorkerMetrics& metrics)
      : planner_(planner),
        options_(options),
        clock_(clock),
        metrics_(metrics),
        incarnation_(options.incarnation.empty() ? NewIncarnation()
                                                 : options.incarnation) {}

  absl::StatusOr<AgentRunResult> Run() {
    DCP_RETURN_IF_ERROR(CheckOptions());
    DCP_ASSIGN_OR_RETURN(placement_.backend, ChooseBackend(options_.backend));
    max_cached_groups_ =
        MaxCachedGroupsFor(placement_.backend, options_.max_cached_groups);
    Rendezvous rendezvous(planner_, MakeRendezvousOptions(), clock_);
    DCP_ASSIGN_OR_RETURN(const Rendezvous::Outcome outcome,
                         rendezvous.Register());
    if (outcome == Rendezvous::Outcome::kStopRequested) {
      Log("asked to stop while waiting for the world; exiting without "
          "joining it");
      result_.stopped_on_request = true;
      return result_;
    }
    const v1::RegisterWorkerResponse& registration = rendezvous.registration();
    rank_ = rendezvous.rank();
    result_.rank = rank_;
    result_.world_size = registration.world_size();
    Log(absl::StrCat(
        "rank ", rank_, " of ", registration.world_size(), " (node slot ",
        registration.node_index(), "); c10d store of rank 0 at ",
        registration.rendezvous_address(), ", backend ", placement_.backend));
    DCP_RETURN_IF_ERROR(Join(rendezvous));
    DCP_RETURN_IF_ERROR(BuildModel(registration));
    DCP_RETURN_IF_ERROR(Resume());
    DCP_RETURN_IF_ERROR(Profile());
    DCP_RETURN_IF_ERROR(Train());
    return result_;
  }

 private:
  void Log(const std::string& line) const {
    const std::string text = absl::StrCat(
        "worker ", options_.worker_id,
        rank_ >= 0 ? absl::StrCat(" (rank ", rank_, ")") : std::string(), ": ",
        line);
    if (options_.log) {
      options_.log(text);
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
      std::fflush(stderr);
    }
  }

  std::function<void(const std::string&)> Logger() const {
    return [this](const std::string& line) { Log(line); };
  }

  /// Rank 0's report lines.
  void Print(const std::string& line) const {
    if (rank_ != 0) return;
    if (options_.print) {
      options_.print(line);
    } else {
      std::fprintf(stdout, "%s\n", line.c_str());
      std::fflush(stdout);
    }
  }

  bool StopRequested() const {
    return options_.stop_requested && options_.stop_requested();
  }

  absl::Status CheckOptions() const {
    if (options_.worker_id.empty()) {
      return absl::InvalidArgumentError(
          "worker_id is empty; give a stable name such as the pod name");
    }
    if (options_.node_name.empty()) {
      return absl::InvalidArgumentError(
          "node_name is empty; give the host name (ranks of one node share "
          "it)");
    }
    if (options_.steps < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("steps = ", options_.steps, "; it must be >= 0"));
    }
    if (options_.checkpoint_every < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint_every = ", options_.checkpoint_every,
                       "; it must be >= 0 (0: only when stopping)"));
    }
    if ((options_.resume || options_.checkpoint_every > 0) &&
        options_.checkpoint_dir.empty()) {
      return absl::InvalidArgumentError(
          "resuming or periodic checkpoints need a checkpoint directory");
    }
    if (options_.store_port < 0 || options_.store_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("store_port = ", options_.store_port,
                       " is not a TCP port (0 picks a free one)"));
    }
    if (options_.collective_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("collective_timeout must be positive");
    }
    if (options_.bucket_micro_batch_sequences < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket_micro_batch_sequences = ",
          options_.bucket_micro_batch_sequences, "; it must be >= 1"));
    }
    return absl::OkStatus();
  }

  // --- Rendezvous and the world ---------------------------------------------

  RendezvousOptions MakeRendezvousOptions() const {
    RendezvousOptions rendezvous;
    rendezvous.worker_id = options_.worker_id;
    rendezvous.node_name = options_.node_name;
    rendezvous.job_id = options_.job_id;
    rendezvous.incarnation = incarnation_;
    rendezvous.precision = std::string(TrainingPrecisionName(options_.precision));
    rendezvous.optimizer_sharding = std::string(ParameterShardingName(
        options_.zero1 ? ParameterSharding::kZero1
                       : ParameterSharding::kReplicated));
    rendezvous.join_timeout = options_.join_timeout;
    rendezvous.store_host = options_.store_host;
    rendezvous.store_port = options_.store_port;
    rendezvous.backend = placement_.backend;
    rendezvous.max_cached_groups = max_cached_groups_;
    rendezvous.libtorch_version = TORCH_VERSION;
    rendezvous.world_timeout = options_.world_timeout;
    rendezvous.poll_initial_backoff = options_.poll_initial_backoff;
    rendezvous.poll_max_backoff = options_.poll_max_backoff;
    rendezvous.stop_requested = options_.stop_requested;
    rendezvous.sleep = options_.sleep;
    rendezvous.log = Logger();
    return rendezvous;
  }

  absl::Status Join(Rendezvous& rendezvous) {
    const v1::RegisterWorkerResponse& registration = rendezvous.registration();
    cluster_ = ClusterSpecFromProto(registration.cluster());
    if (cluster_.NumGpus() != registration.world_size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the planner's cluster has ", cluster_.NumGpus(),
                       " ranks but its world has ", registration.world_size()));
    }
    DCP_ASSIGN_OR_RETURN(const StoreAddress store, rendezvous.AwaitStore());
    // The rank's own GPU becomes current before any communicator exists:
    // NCCL binds each communicator (and c10d its barriers) to the current
    // device, GPU 0 unless set.
    DCP_ASSIGN_OR_RETURN(
        placement_.device,
        DeviceOfRank(placement_.backend, rank_, cluster_.gpus_per_node));
    DCP_RETURN_IF_ERROR(UseDevice(placement_.device));
    C10dOptions c10d;
    c10d.device = placement_.device;
    c10d.rank = rank_;
    c10d.world_size = registration.world_size();
    c10d.backend = placement_.backend;
    c10d.timeout = options_.collective_timeout;
    c10d.store_prefix = "dcp";
    c10d.max_cached_groups = max_cached_groups_;
    c10d.store_host = store.host;
    c10d.store_port = store.port;
    CommunicatorFactory factory = options_.create_communicator;
    if (!factory) factory = &CreateC10dCommunicator;
    absl::StatusOr<std::unique_ptr<Communicator>> communicator = factory(c10d);
    if (!communicator.ok()) {
      return WithContext(
          communicator.status(),
          absl::StrCat("joining the world (", c10d.backend, ", store at ",
                       JoinHostPort(c10d.store_host, c10d.store_port), ")"));
    }
    communicator_ = *std::move(communicator);
    consensus_ =
        std::make_unique<WorldConsensus>(*communicator_, placement_.device);
    Log(absl::StrCat("joined the world of ", communicator_->world_size(),
                     " on ", placement_.device.str()));
    return absl::OkStatus();
  }

  // --- Model and checkpoints
  // ---------------------------------------------------

  torch::Dtype ComputeDtype() const {
    return options_.precision == TrainingPrecision::kBf16 ? torch::kBFloat16
                                                          : torch::kFloat32;
  }

  absl::Status BuildModel(const v1::RegisterWorkerResponse& registration) {
    model_spec_ = ModelSpecFromProto(registration.model());
    GptModelOptions model_options;
    model_options.seed = options_.model_seed;
    model_options.dtype = ComputeDtype();
    model_options.device = placement_.device;
    // A GptModel, or a DitModel for a diffusion-transformer spec.
    absl::StatusOr<std::shared_ptr<TrainableModel>> model =
        CreateTrainableModel(model_spec_, model_options);
    if (!model.ok()) {
      return WithContext(model.status(),
                         absl::StrCat("building model \"", model_spec_.name,
                                      "\" from the planner's ModelSpec"));
    }
    model_ = *std::move(model);
    PlanExecutorOptions executor_options;
    executor_options.collective_timeout = options_.collective_timeout;
    executor_options.learning_rate = options_.learning_rate;
    executor_options.clock = &clock_;
    executor_options.zero1 = options_.zero1;
    executor_ = std::make_unique<PlanExecutor>(model_, *communicator_,
                                               executor_options);
    CheckpointCoordinatorOptions checkpoint_options;
    checkpoint_options.dir = options_.checkpoint_dir;
    checkpoint_options.every = options_.checkpoint_every;
    checkpoint_options.timeout = options_.checkpoint_timeout;
    checkpoint_options.model_name = model_spec_.name;
    checkpoint_options.settings.precision =
        std::string(TrainingPrecisionName(options_.precision));
    checkpoint_options.settings.zero1 = options_.zero1;
    checkpoint_options.gather_master = [this](bool keep) {
      return executor_->GatherMasterWeightState(keep);
    };
    checkpoint_options.load_master = [this](const MasterWeightState& state) {
      return executor_->LoadMasterWeightState(state);
    };
    checkpoints_ = std::make_unique<CheckpointCoordinator>(
        checkpoint_options, *consensus_, *model_, executor_->optimizer(),
        clock_, Logger());
    return absl::OkStatus();
  }

  absl::Status Resume() {
    if (!options_.resume) return absl::OkStatus();
    DCP_ASSIGN_OR_RETURN(const std::optional<int64_t> next_step,
                         checkpoints_->Resume());
    if (next_step.has_value()) {
      result_.first_step = *next_step;
      const std::string line = absl::StrCat(
          "resumed from ", checkpoints_->path(), " at step ", *next_step);
      Log(line);
      Print(line);
    } else {
      Log(absl::StrCat("no checkpoint in ", options_.checkpoint_dir,
                       "; starting at step 0"));
    }
    return absl::OkStatus();
  }

  // --- Profile
  // -----------------------------------------------------------------

  absl::Status Profile() {
    ProfilePhaseOptions profile;
    profile.worker_id = options_.worker_id;
    profile.incarnation = incarnation_;
    profile.wanted = options_.profile;
    profile.profile = options_.profile_options;
    profile.profile.device = placement_.device;
    // The dtype the steps run in, so the fit predicts them.
    profile.profile.dtype = ComputeDtype();
    profile.profile.collective_timeout = options_.collective_timeout;
    profile.gpus_per_node = cluster_.gpus_per_node;
    profile.collective_timeout = options_.collective_timeout;
    profile.log = Logger();
    profile.print = [this](const std::string& line) { Print(line); };
    return RunProfilePhase(planner_, model_spec_, *communicator_, *consensus_,
                           profile, clock_);
  }

  // --- Training
  // ----------------------------------------------------------------

  absl::StatusOr<std::unique_ptr<StepPlanSource>> MakePlanSource(
      int64_t workload_max_length) {
    if (options_.plan_source == PlanSource::kPlanner) {
      PlannerPlanSourceOptions planner_options;
      planner_options.worker_id = options_.worker_id;
      planner_options.incarnation = incarnation_;
      planner_options.rank = rank_;
      planner_options.submits_ahead = rank_ == 0;
      planner_options.model = model_spec_;
      planner_options.cluster = cluster_;
      planner_options.log = Logger();
      return std::make_unique<PlannerPlanSource>(planner_, planner_options);
    }
    StaticOptions static_options;
    static_options.workload_max_length_tokens = workload_max_length;
    static_options.micro_batch_sequences =
        options_.bucket_micro_batch_sequences;
    static_options.sp_size = options_.bucket_static_sp;
    // The run's batches, for a strategy tuned over the run: the stream
    // Train draws from, drawn again from its start.
    const auto run_batches =
        [this]() -> absl::StatusOr<std::vector<std::vector<int64_t>>> {
      absl::StatusOr<std::unique_ptr<LengthSource>> lengths =
          ParseWorkloadSpec(options_.workload);
      if (!lengths.ok()) return WithContext(lengths.status(), "the workload");
      absl::StatusOr<BatchStream> stream = BatchStream::Create(
          *std::move(lengths), options_.batch, options_.workload_seed);
      if (!stream.ok()) {
        return WithContext(stream.status(), "the batch stream");
      }
      std::vector<std::vector<int64_t>> batches;
      for (int64_t step = 0; step < options_.steps; ++step) {
        std::vector<int64_t> batch;
        for (const Sample& sample : stream->Next()) {
          batch.push_back(sample.length_tokens);
        }
        batches.push_back(std::move(batch));
      }
      return batches;
    };
    DCP_ASSIGN_OR_RETURN(
        std::unique_ptr<StrategyPlanSource> peer,
        StrategyPlanSource::Create(planner_, options_.peer_strategy,
                                   static_options, run_batches, Logger(),
                                   rank_));
    return std::unique_ptr<StepPlanSource>(std::move(peer));
  }

  absl::Status Train() {
    absl::StatusOr<std::unique_ptr<LengthSource>> lengths =
        ParseWorkloadSpec(options_.workload);
    if (!lengths.ok()) return WithContext(lengths.status(), "the workload");
    const int64_t workload_max_length = (*lengths)->MaxLengthTokens();
    absl::StatusOr<BatchStream> stream = BatchStream::Create(
        *std::move(lengths), options_.batch, options_.workload_seed);
    if (!stream.ok()) return WithContext(stream.status(), "the batch stream");
    DCP_ASSIGN_OR_RETURN(const std::unique_ptr<SequenceInputSource> dataset,
                         SequenceInputSource::Open(options_.data, *model_));
    DCP_ASSIGN_OR_RETURN(const std::unique_ptr<StepPlanSource> plans,
                         MakePlanSource(workload_max_length));

    const int64_t first_step = result_.first_step;
    result_.next_step = first_step;
    for (int64_t k = 0; k < first_step; ++k) stream->Next();
    if (first_step >= options_.steps) {
      Log(absl::StrCat("nothing to do: the run is at step ", first_step, " of ",
                       options_.steps));
      return rank_ == 0 ? WriteSummary() : absl::OkStatus();
    }
    std::vector<Sample> current = stream->Next();
    plans->BatchKnown(current, first_step);
    for (int64_t step = first_step; step < options_.steps; ++step) {
      std::vector<Sample> next;
      if (step + 1 < options_.steps) {
        next = stream->Next();
        plans->BatchKnown(next, step + 1);
      }
      DCP_ASSIGN_OR_RETURN(const bool stop,
                           RunStep(step, current, *dataset, *plans));
      if (stop) break;
      current = std::move(next);
    }
    return absl::OkStatus();
  }

  /// Runs step `step` on `samples` and what follows it: report, record,
  /// checkpoint, summary. True when the ranks agreed to stop after it.
  absl::StatusOr<bool> RunStep(int64_t step, const std::vector<Sample>& samples,
                               const SequenceInputSource& data,
                               StepPlanSource& plans) {
    DCP_ASSIGN_OR_RETURN(const PlanOfStep planned, plans.PlanOf(samples, step));
    int64_t loss_tokens = 0;
    for (const Sample& sample : samples) {
      loss_tokens += model_->LossTokensOfSequence(sample.length_tokens);
    }
    absl::Status token_error;
    auto inputs_of = [&](int index) -> SequenceInput {
      const Sample& sample = samples.at(index);
      absl::StatusOr<SequenceInput> input =
          data.Input(sample.id, sample.length_tokens);
      if (!input.ok()) {
        if (token_error.ok()) token_error = input.status();
        return {};
      }
      return *std::move(input);
    };
    const absl::Time start = clock_.MonotonicNow();
    absl::StatusOr<StepResult> executed =
        planned.IsPhased()
            ? executor_->RunStep(planned.phased, inputs_of, loss_tokens)
            : executor_->RunStep(planned.plan, inputs_of, loss_tokens);
    // RunStep returns once the step's loss is on the host, so the device
    // has run the whole step when the clock stops.
    const double step_seconds =
        absl::ToDoubleSeconds(clock_.MonotonicNow() - start);
    DCP_RETURN_IF_ERROR(WithContext(
        token_error, absl::StrCat("reading the tokens of step ", step)));
    DCP_RETURN_IF_ERROR(WithContext(
        executed.status(), absl::StrCat("step ", step, " on rank ", rank_)));
    DCP_ASSIGN_OR_RETURN(const bool stop,
                         consensus_->Any(StopRequested(), "whether to stop",
                                         options_.collective_timeout));

    const StepMeasurement measured =
        Measure(*executed, step_seconds,
                std::max<int64_t>(0, executed->peak_allocated_bytes));
    metrics_.StepCompleted(rank_, measured.totals);
    plans.StepMeasured(step, measured);

    StepRecord record = planned.IsPhased()
                            ? StepRecordOfPhasedPlan(planned.phased, step)
                            : StepRecordOfPlan(planned.plan, step);
    record.measured_seconds = step_seconds;
    record.loss = executed->global_loss;
    record.params_version = planned.params_version;
    result_.steps.push_back(record);
    result_.next_step = step + 1;
    WriteStepTimings(step, samples, planned, *executed, step_seconds);
    Print(absl::StrFormat(
        "step %d: plan %s | predicted %.3f s measured %.3f s | loss %.4f", step,
        record.plan_shape, record.predicted_seconds, record.measured_seconds,
        record.loss));

    if (stop) result_.stopped_on_request = true;
    if (checkpoints_->Due(step + 1, options_.steps, stop)) {
      DCP_RETURN_IF_ERROR(checkpoints_->WriteOnEveryRank(step + 1));
    }
    if (rank_ == 0) {
      // Only a report: failing here would leave the other ranks waiting in
      // the next step's collectives.
      if (absl::Status written = WriteSummary(); !written.ok()) {
        Log(absl::StrCat("warning: the run summary was not written: ",
                         written.ToString()));
      }
    }
    if (stop) {
      Log(absl::StrCat("stopping at the step boundary before step ", step + 1,
                       " as asked",
                       options_.checkpoint_dir.empty()
                           ? "; no checkpoint directory, so no checkpoint"
                           : absl::StrCat("; rank 0 wrote the checkpoint ",
                                          checkpoints_->path())));
      Print(absl::StrCat("stopped on request before step ", step + 1));
    }
    return stop;
  }

  /// Next to the run summary (worker/step_timing_files.h): this rank's
  /// measured micro-batches of step `step`, and on rank 0 the step's plan
  /// with its cost model. Only a report: failures are warnings. A plan of
  /// phases gets its rank files (micro-batches phase after phase, the group
  /// of its first phase) but no plan file: that file and the measured
  /// timeline built from it hold one layout.
  void WriteStepTimings(int64_t step, const std::vector<Sample>& samples,
                        const PlanOfStep& planned, const StepResult& executed,
                        double step_seconds) {
    if (options_.summary_file.empty()) return;
    const std::string dir = StepTimingDir(options_.summary_file);
    RankStepTiming timing;
    timing.step = step;
    timing.rank = rank_;
    timing.group_index = executed.group_index;
    timing.step_seconds = step_seconds;
    timing.gradient_allreduce_seconds = executed.gradient_allreduce_seconds;
    for (const MicroBatchResult& micro : executed.micro_batches) {
      timing.micro_batches.push_back(
          {micro.compute_seconds, micro.communication_seconds});
    }
    absl::Status written = WriteRankStepTiming(dir, timing);
    if (written.ok() && rank_ == 0 && !planned.IsPhased()) {
      written = WritePlanFile(dir, step, samples, planned);
    }
    if (!written.ok()) {
      Log(absl::StrCat("warning: the step timings of step ", step,
                       " were not written: ", written.ToString()));
    }
  }

  absl::Status WritePlanFile(const std::string& dir, int64_t step,
                             const std::vector<Sample>& samples,
                             const PlanOfStep& planned) {
    // The cost model the plan was priced with: the planner's version the
    // plan names (a peer's plans: the current one, asked once, which
    // StrategyPlanSource priced them with).
    const bool bucket = options_.plan_source == PlanSource::kPeer;
    if (!cost_model_answer_.has_value() ||
        (!bucket &&
         cost_model_answer_->params_version() != planned.params_version)) {
      v1::GetClusterModelRequest request;
      if (!bucket) request.set_params_version(planned.params_version);
      absl::StatusOr<v1::GetClusterModelResponse> answer =
          planner_.GetClusterModel(request);
      if (!answer.ok()) {
        return WithContext(answer.status(),
                           absl::StrCat("asking the planner's cost model v",
                                        planned.params_version));
      }
      answer->clear_reports();
      cost_model_answer_ = *std::move(answer);
    }
    StepPlanFile plan_file;
    plan_file.step = step;
    plan_file.plan = planned.plan;
    for (const Sample& sample : samples) {
      plan_file.lengths_tokens.push_back(sample.length_tokens);
    }
    plan_file.plan_params_version = planned.params_version;
    plan_file.cost_model_params_version = cost_model_answer_->params_version();
    plan_file.model = ModelSpecFromProto(cost_model_answer_->model());
    plan_file.cluster = ClusterSpecFromProto(cost_model_answer_->cluster());
    plan_file.params = CostParamsFromProto(cost_model_answer_->params());
    return WriteStepPlanFile(dir, plan_file);
  }

  absl::Status WriteSummary() const {
    if (options_.summary_file.empty()) return absl::OkStatus();
    RunSummary summary;
    summary.plan_source = options_.plan_source == PlanSource::kPlanner
                              ? "planner"
                              : options_.peer_strategy;
    summary.model = model_spec_.name;
    summary.world_size = result_.world_size;
    summary.workload = options_.workload;
    summary.workload_seed = options_.workload_seed;
    summary.first_step = result_.first_step;
    summary.next_step = result_.next_step;
    summary.steps_requested = options_.steps;
    summary.stopped_on_request = result_.stopped_on_request;
    summary.steps = result_.steps;
    return WriteRunSummary(options_.summary_file, summary);
  }

  PlannerClient& planner_;
  const WorkerAgentOptions& options_;
  const Clock& clock_;
  WorkerMetrics& metrics_;
  /// This process's incarnation, sent with every planner call.
  const std::string incarnation_;

  Placement placement_;
  /// The group cache bound in use (options_.max_cached_groups resolved for
  /// the backend).
  int max_cached_groups_ = 0;
  /// -1 until registered.
  int rank_ = -1;
  ClusterSpec cluster_;
  ModelSpec model_spec_;
  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<WorldConsensus> consensus_;
  std::shared_ptr<TrainableModel> model_;
  std::unique_ptr<PlanExecutor> executor_;
  std::unique_ptr<CheckpointCoordinator> checkpoints_;
  AgentRunResult result_;
  /// Rank 0: the planner's cost model as last asked (WritePlanFile).
  std::optional<v1::GetClusterModelResponse> cost_model_answer_;
};

}  // namespace

WorkerAgent::WorkerAgent(PlannerClient& planner, WorkerAgentOptions options,
                         const Clock& clock, WorkerMetrics* metrics)
    : planner_(planner),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics) {}

absl::StatusOr<AgentRunResult> WorkerAgent::Run() {
  NoopWorkerMetrics no_metrics;
  AgentRun run(planner_, options_, clock_,
               metrics_ != nullptr ? *metrics_ : no_metrics);
  return run.Run();
}

}  // namespace dcp
