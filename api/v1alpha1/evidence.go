package v1alpha1

import "encoding/json"

// EvidenceOf reads the fault evidence the node agent wrote into annotations
// (AnnotationFaultEvidence): nil when there is none, or it is unreadable.
func EvidenceOf(annotations map[string]string) *FaultEvidence {
	raw, ok := annotations[AnnotationFaultEvidence]
	if !ok {
		return nil
	}
	var ev FaultEvidence
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		return nil
	}
	return &ev
}
