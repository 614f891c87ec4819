package health

// linkUpdate is what the monitor needs from one rtnetlink link message.
type linkUpdate struct {
	Index   int32
	Name    string
	Deleted bool   // RTM_DELLINK
	AdminUp bool   // IFF_UP
	Oper    string // IFLA_OPERSTATE by name; "unknown" when absent
}

// operStateName names an IF_OPER_* value as sysfs prints it; a value the
// kernel does not define is "unknown".
func operStateName(v uint8) string {
	if int(v) < len(operStates) {
		return operStates[v]
	}
	return operStates[0]
}
