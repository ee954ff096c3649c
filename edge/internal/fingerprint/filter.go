package fingerprint

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// ackFilter drops the probe's own pure ACKs (no payload, no SYN/FIN/RST) on the egress of the
// interface that carries them to the target, for the connections named in its map. The server then
// sees no acknowledgement: it sends its initial window and stops, or it retransmits its SYN-ACK.
// The program is written with cilium/ebpf's assembler (no clang needed); it and its link live only as
// long as the probe's file descriptors, so nothing stays attached after the process ends.
type ackFilter struct {
	conns *ebpf.Map // key: local port << 16 | remote port (host order), value: unused
	prog  *ebpf.Program
	link  link.Link
}

const (
	tcxNext = -1 // TCX_NEXT: let the next program (or the stack) decide
	tcxDrop = 2  // TCX_DROP
)

// l3Offset is where the IPv4 header starts at tc egress of an interface: after the Ethernet
// header on Ethernet-like devices (veth, lo), at 0 on raw IP devices (TUN).
func l3Offset(ifname string) (int32, error) {
	raw, err := os.ReadFile("/sys/class/net/" + ifname + "/type")
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", ifname, err)
	}
	switch t, _ := strconv.Atoi(strings.TrimSpace(string(raw))); t {
	case 1, 772: // ARPHRD_ETHER, ARPHRD_LOOPBACK
		return 14, nil
	case 65534: // ARPHRD_NONE (TUN)
		return 0, nil
	default:
		return 0, fmt.Errorf("interface %s: link type %d is not supported (Ethernet, loopback or TUN)", ifname, t)
	}
}

// filterProgram is the egress program: IPv4/TCP, no SYN/FIN/RST, no payload, (sport, dport) in
// the map -> drop; anything else -> next.
func filterProgram(conns *ebpf.Map, l3 int32) asm.Instructions {
	const ipBuf, tcpBuf, keyOff = -40, -20, -44
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // skb->protocol (big endian in the low 16 bits)
		asm.JNE.Imm(asm.R2, 0x0008, "pass"),       // ETH_P_IP as read on a little-endian host
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, l3),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, ipBuf),
		asm.Mov.Imm(asm.R4, 20),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R3, asm.RFP, ipBuf+9, asm.Byte), // protocol
		asm.JNE.Imm(asm.R3, 6, "pass"),
		asm.LoadMem(asm.R8, asm.RFP, ipBuf, asm.Byte), // version/IHL
		asm.And.Imm(asm.R8, 0x0f),
		asm.LSh.Imm(asm.R8, 2), // IP header bytes
		asm.LoadMem(asm.R7, asm.RFP, ipBuf+2, asm.Byte),
		asm.LSh.Imm(asm.R7, 8),
		asm.LoadMem(asm.R3, asm.RFP, ipBuf+3, asm.Byte),
		asm.Or.Reg(asm.R7, asm.R3),
		asm.Sub.Reg(asm.R7, asm.R8), // TCP header + payload bytes
		asm.Add.Imm(asm.R8, l3),     // TCP header offset
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, tcpBuf),
		asm.Mov.Imm(asm.R4, 20),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R3, asm.RFP, tcpBuf+13, asm.Byte), // flags
		asm.And.Imm(asm.R3, 0x07),                         // FIN|SYN|RST
		asm.JNE.Imm(asm.R3, 0, "pass"),
		asm.LoadMem(asm.R3, asm.RFP, tcpBuf+12, asm.Byte), // data offset
		asm.RSh.Imm(asm.R3, 4),
		asm.LSh.Imm(asm.R3, 2),
		asm.Sub.Reg(asm.R7, asm.R3),
		asm.JNE.Imm(asm.R7, 0, "pass"), // carries data: the request itself
		asm.LoadMem(asm.R2, asm.RFP, tcpBuf, asm.Byte),
		asm.LSh.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.RFP, tcpBuf+1, asm.Byte),
		asm.Or.Reg(asm.R2, asm.R3),
		asm.LSh.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.RFP, tcpBuf+2, asm.Byte),
		asm.Or.Reg(asm.R2, asm.R3),
		asm.LSh.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.RFP, tcpBuf+3, asm.Byte),
		asm.Or.Reg(asm.R2, asm.R3),
		asm.StoreMem(asm.RFP, keyOff, asm.R2, asm.Word),
		asm.LoadMapPtr(asm.R1, conns.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"),
		asm.Return(),
	}
}

// newACKFilter loads the program and attaches it at TCX egress of the interface, whose IPv4 header
// starts at l3.
func newACKFilter(ifindex int, l3 int32) (*ackFilter, error) {
	conns, err := ebpf.NewMap(&ebpf.MapSpec{Name: "probe_conns", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 16})
	if err != nil {
		return nil, fmt.Errorf("ack filter map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "probe_ackdrop", Type: ebpf.SchedCLS,
		Instructions: filterProgram(conns, l3), License: "GPL"})
	if err != nil {
		conns.Close()
		return nil, fmt.Errorf("ack filter program: %w", err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		prog.Close()
		conns.Close()
		return nil, fmt.Errorf("ack filter: attach at tcx egress of interface %d: %w", ifindex, err)
	}
	return &ackFilter{conns: conns, prog: prog, link: l}, nil
}

func connKey(localPort, remotePort int) uint32 { return uint32(localPort)<<16 | uint32(remotePort) }

// Drop starts dropping the pure ACKs of the connection (localPort -> remotePort).
func (f *ackFilter) Drop(localPort, remotePort int) error {
	return f.conns.Put(connKey(localPort, remotePort), uint32(1))
}

// Release lets the connection's ACKs through again.
func (f *ackFilter) Release(localPort, remotePort int) {
	_ = f.conns.Delete(connKey(localPort, remotePort)) // absent is fine; the map goes at Close anyway
}

func (f *ackFilter) Close() {
	f.link.Close()
	f.prog.Close()
	f.conns.Close()
}
