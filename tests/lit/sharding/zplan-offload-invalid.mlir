// RUN: zplan-opt --zplan-offload=param=nvme --verify-diagnostics %s

// Tests that an unknown offload target is refused, naming it.
// expected-error @+1 {{offload param must be 'none' or 'cpu', got 'nvme'}}
module {
}
