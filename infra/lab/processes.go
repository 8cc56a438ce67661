package lab

import (
	"context"
	"fmt"
)

// Process is one process of a running lab, named for people ("node1
// redis-server").
type Process struct {
	Name string
	PID  int
}

// Processes lists the lab's running processes whose CPU a load accounts
// (redlab load --lab-cpu): per node its redis-server and its supervisor
// (with the fault front), per etcd member its etcd and its supervisor.
func (l *Lab) Processes(ctx context.Context) ([]Process, error) {
	sts, err := l.Status(ctx)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, st := range sts {
		if st.RedisPID > 0 {
			out = append(out, Process{Name: fmt.Sprintf("node%d redis-server", st.ID), PID: st.RedisPID})
		}
		if st.SupervisorPID > 0 {
			out = append(out, Process{Name: fmt.Sprintf("node%d supervisor", st.ID), PID: st.SupervisorPID})
		}
	}
	members, err := l.EtcdStatus(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		if m.EtcdPID > 0 {
			out = append(out, Process{Name: fmt.Sprintf("etcd%d etcd", m.ID), PID: m.EtcdPID})
		}
		if m.SupervisorPID > 0 {
			out = append(out, Process{Name: fmt.Sprintf("etcd%d supervisor", m.ID), PID: m.SupervisorPID})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lab: no running node in the lab at %s", l.stateDir)
	}
	return out, nil
}
