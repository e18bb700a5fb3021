//===- Report.h - The memory/communication report -------------------------===//

#ifndef ZPLAN_COMPILER_PLAN_REPORT_H
#define ZPLAN_COMPILER_PLAN_REPORT_H

#include "compiler/plan/EmitPlan.h"

#include <string>

namespace zplan::plan {

/// "N<countSuffix> (X.XX unit)" with binary units, e.g. "1536 (1.50 KiB)" or,
/// with countSuffix " bytes", "1536 bytes (1.50 KiB)". Shared by the report
/// and the memory-budget diagnostics.
std::string formatBytes(uint64_t bytes, const char *countSuffix = "");

/// The human-readable report: per rank the memory figures, per step the
/// bytes sent per collective kind and mesh axis.
std::string formatReport(const PlanSummary &summary);

/// The same as JSON: {"world", "tp", "dp", "dtype", "collective_hash",
/// "ranks": [{"rank", "resident_weight_bytes", "peak_gathered_param_bytes",
/// "activation_bytes", "param_bytes", "grad_bytes", "master_bytes",
/// "moment_bytes", "state_bytes", "bucket_bytes", their host parts
/// "host_param_bytes" ... "host_state_bytes", "collective_buffer_bytes",
/// "workspace_bytes", "device_arena_bytes", "runtime_reserve_bytes",
/// "planned_peak_bytes", "planned_host_bytes", "comm": {kind: {axis:
/// bytes sent}}, "comm_payload": {kind: {axis: bytes}}, "comm_calls": {kind:
/// {axis: count}}}]}.
std::string formatReportJson(const PlanSummary &summary);

} // namespace zplan::plan

#endif // ZPLAN_COMPILER_PLAN_REPORT_H
