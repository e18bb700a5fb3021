// RUN: zplan-opt --zplan-set-mesh="tp=0 dp=2" --verify-diagnostics %s

// Tests that a mesh axis below 1 is refused.
// expected-error @+1 {{mesh sizes must be at least 1, got tp = 0, dp = 2}}
module {
}
