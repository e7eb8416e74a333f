// Package agent is doorman's Kubernetes node agent (cmd/doorman-agent,
// run by the DaemonSet beside install-cni). With client-go reflectors
// (list, then watch from the last resource version) it watches the pods of its node, the namespaces, the nodes, the
// ClusterNetworkPolicies (policy.networking.k8s.io/v1beta1) and doorman's
// EgressPolicies, and, cluster-wide, every pod only once a
// ClusterNetworkPolicy has a pods or namespaces peer (whose addresses
// doorman must know; until that list is in it recomputes
// nothing, since a Deny of fewer pods would be wider). On any change it recomputes the policy of every
// pod of its node (package kube/policy), writes it to the node
// (<dir>/pods/<namespace>/<name>.json, which the CNI plugin falls back to
// when the agent does not answer), puts it in force on the pod's live
// sandbox as `doorman set` does (sandbox.UpdatePolicy), with its
// allowDirect destinations and ICMP where they changed
// (sandbox.UpdateDirect), and reports
// what doorman could not express exactly as Events on the object that
// says it and on the node.
//
// A watch the API server fails (stopped, restarting) is tried again
// after at most 4 s (watchBackoff), not client-go's informers' up to a
// minute, so that a change made once it is back reaches the pods within
// seconds.
//
// A CRD's resource the API server says it does not serve (404) is taken
// for not installed, and looked for again every 30 s (its watch put
// to use once its first list is in); any other discovery error is tried again, never
// taken for "not installed", which would drop the cluster's rules.
//
// It answers the CNI plugin's ADD over a unix socket (<dir>/agent.sock,
// see package agentclient) from its caches, only once they have synced,
// waiting briefly for a pod it has not seen yet. It reads the Secrets
// EgressPolicies name for credentials (get, never list or watch) and
// writes their values to <dir>/secrets (0600), which the pods' proxies
// read. It serves Prometheus metrics read from the pods' decision logs
// (see Metrics).
package agent
