package ipc

// FreeingWriteGuard is a WriteGuard that still accepts the writes that
// free space while it refuses others because its disk is low (issue 12):
// for those routes (freesSpace) the server calls FreeingWriteAllowed
// instead of WriteAllowed. FreeingWriteAllowed must be cheap (a statfs).
type FreeingWriteGuard interface {
	WriteGuard
	FreeingWriteAllowed() error
}

// freeingRoutes are the routes whose writes free space: a cancel (or, with
// ?purge=true, the removal of a finished task) and a purge.
var freeingRoutes = map[[2]string]bool{
	{"DELETE", "/v1/tasks/{id}"}: true,
	{"POST", "/v1/tasks/purge"}:  true,
}

// writeAllowed asks the backend's write guard whether def may run: nil
// when the backend has none.
func (s *Server) writeAllowed(def *routeDef) error {
	if freeingRoutes[[2]string{def.Method, def.Pattern}] {
		if g, ok := s.backend.(FreeingWriteGuard); ok {
			return g.FreeingWriteAllowed()
		}
	}
	if g, ok := s.backend.(WriteGuard); ok {
		return g.WriteAllowed()
	}
	return nil
}
