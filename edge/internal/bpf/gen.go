// Package bpf holds Tailor's eBPF programs (C source and the committed
// bpf2go output, so building needs no clang) and their Go bindings.
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -type event -type config -type group -type meta -type lpm_key -type conn -type knob -type counter Sockops sockops.bpf.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel Lpmbench lpmbench.bpf.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu
