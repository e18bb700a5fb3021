// RUN: zplan-opt --zplan-zero="stage=5" --verify-diagnostics %s

// Tests that a ZeRO stage outside 0-3 is refused.
// expected-error @+1 {{ZeRO stage must be 0, 1, 2 or 3, got 5}}
module attributes {zd.dp = 2 : i64} {
}
