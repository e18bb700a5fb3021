// RUN: zplan-opt --zplan-zero="stage=3 persist-threshold=-1" --verify-diagnostics %s

// Tests that negative byte options are refused.
// expected-error @+1 {{persist-threshold, prefetch-bytes and max-live-bytes must not be negative}}
module attributes {zd.dp = 2 : i64} {
}
