// RUN: zplan-opt --zplan-zero="stage=3" --verify-diagnostics %s

// Tests that stage 3 with dp = 1 says it partitions nothing.
// expected-remark @+1 {{ZeRO stage 3 with dp = 1 partitions nothing: every parameter stays whole on its rank}}
module attributes {zd.dp = 1 : i64} {
}
