"""Files: Parquet as views (`lake-parquet`), a folder of files (`files`) and mixed formats
(`files-mixed`)."""
