package floor

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestUpdateRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.json")
	empty, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Disk != nil || empty.Fanout != nil {
		t.Errorf("a missing file: got %+v, want an empty File", empty)
	}
	// The script records as it goes: the disk, then each policy.
	steps := []func(*File){
		func(f *File) { f.Disk = []Disk{{Writers: 1, SyncsPerS: 900}, {Writers: 5, SyncsPerS: 2500}} },
		func(f *File) { f.Fanout = map[string]Fanout{"always": {Nodes: 5, LocksPerS: 700}} },
		func(f *File) { f.Fanout["everysec"] = Fanout{Nodes: 5, LocksPerS: 9000} },
	}
	for _, s := range steps {
		if err := Update(path, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		Disk:   []Disk{{Writers: 1, SyncsPerS: 900}, {Writers: 5, SyncsPerS: 2500}},
		Fanout: map[string]Fanout{"always": {Nodes: 5, LocksPerS: 700}, "everysec": {Nodes: 5, LocksPerS: 9000}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if d, ok := got.DiskFor(5); !ok || d.SyncsPerS != 2500 {
		t.Errorf("DiskFor(5): got %+v, %t, want 2500/s, true", d, ok)
	}
	if _, ok := got.DiskFor(3); ok {
		t.Error("DiskFor(3): got true, want false")
	}
}
