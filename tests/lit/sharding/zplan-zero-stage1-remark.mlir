// RUN: zplan-opt --zplan-zero="stage=1" --verify-diagnostics %s

// Tests that stages 1-2 say they shard training state only.
// expected-remark @+1 {{ZeRO stage 1 only shards training state (gradients, optimizer state); inference parameters stay replicated}}
module attributes {zd.dp = 2 : i64} {
}
