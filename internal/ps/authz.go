package ps

import (
	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// callers are the roles that may call each PS method. Gradients and a
// model's first parameters come from the job's workers only (each pushes
// only as itself); what changes the shard's shape or writes files
// (SetLiveWorkers, SaveModel, Reshard, CommitReshard) from the master
// only; a shard being re-sharded exports to its peers.
func callers() map[string][]tlsid.Role {
	return map[string][]tlsid.Role{
		"PushModel":            {tlsid.Worker},
		"PushGradients":        {tlsid.Worker},
		"PullDenseParameters":  {tlsid.Worker, tlsid.Master},
		"PullEmbeddingVectors": {tlsid.Worker, tlsid.Master},
		"GetStatus":            {tlsid.Worker, tlsid.Master},
		"GetApplied":           {tlsid.Worker, tlsid.Master, tlsid.PS},
		"ExportShard":          {tlsid.PS, tlsid.Master},
		"SetLiveWorkers":       {tlsid.Master},
		"SaveModel":            {tlsid.Master},
		"Reshard":              {tlsid.Master},
		"CommitReshard":        {tlsid.Master},
	}
}

// Policy authorizes calls to a PS by the caller's proven identity.
func Policy() tlsid.Policy {
	table, who := map[string][]tlsid.Role{}, callers()
	for _, m := range pserverpb.Pserver_ServiceDesc.Methods {
		table["/"+pserverpb.Pserver_ServiceDesc.ServiceName+"/"+m.MethodName] = who[m.MethodName]
	}
	return tlsid.Roles(table)
}
