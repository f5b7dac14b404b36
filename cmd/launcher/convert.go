package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/convert"
)

func newConvertCommand(env *cli.Env) *cobra.Command {
	var (
		file string
		o    convert.Options
	)
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Print the TrainingRun that does the job of a JobSet, a PyTorchJob or a TrainJob",
		Long: `Read a JobSet (jobset.x-k8s.io/v1alpha2), a Kubeflow PyTorchJob (kubeflow.org/v1) or a
Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) and print the TrainingRun that does
the same job, as YAML for kubectl apply or launcher submit. Standard error says, one line
each, what was not carried over as it was and why: "note" for the same job in faultline's
form (another DNS name, a field whose behaviour the run keeps), "differs", naming the source
field and why, for every change in behaviour (a budget counted per failure class, restarts
of the gang where the source restarted a pod, a field dropped). The exit code is 0, or 3 when something differs (the run is printed all
the same), 2 for a file that cannot be read. It reads only the file, never the cluster.
docs/migration.md maps every field.`,
		Example: `  launcher convert -f jobset.yaml > run.yaml
  kubectl get pytorchjob mnist -o yaml | launcher convert -f - | kubectl apply -f -
  launcher convert -f trainjob.yaml --framework pytorch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return cli.UsageError("-f FILE is required (\"-\" for standard input)")
			}
			var r io.Reader = env.IO.In
			source := "standard input"
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return cli.UsageError("%v", err)
				}
				defer f.Close()
				r, source = f, file
			}
			return cli.ConvertFile(r, source, o, out(env), env.IO.ErrOut)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", `file with the JobSets, PyTorchJobs or TrainJobs ("-" for standard input)`)
	cmd.Flags().StringVar(&o.Framework, "framework", "", `framework plugin of the runs (default: the source's, else guessed from the template, else "none")`)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}
