"""`tenure demo`: a small bank whose transfers run as Tenure jobs under real crashes."""
